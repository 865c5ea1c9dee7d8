// Rotary embedding (rotate-half convention) in place, blocks (row, part): each block computes the
// row's cos/sin in shared memory from a double-precision angle, then rotates its part of the
// row's (head, pair) items (RopeRowParts: one a thread for a decode step's few rows).
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/launch.cuh"
#include "core/backend/cuda/rope.cuh"

namespace pulse::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void RopeKernel(float* __restrict__ x, int64_t row_stride, int32_t num_heads,
                           int32_t head_dim, const int32_t* __restrict__ positions,
                           const float* __restrict__ inv_freq) {
  WaitForPriorGrids();
  __shared__ float cos_table[kRopeMaxHalf];
  __shared__ float sin_table[kRopeMaxHalf];
  const int64_t row = blockIdx.x;
  const int32_t half = head_dim / 2;
  RopeTables(positions[row], inv_freq, half, cos_table, sin_table);
  float* base = x + row * row_stride;
  for (int32_t item = static_cast<int32_t>(blockIdx.y * blockDim.x + threadIdx.x);
       item < num_heads * half; item += static_cast<int32_t>(gridDim.y * blockDim.x)) {
    const int32_t head = item / half;
    const int32_t i = item % half;
    float* x1 = base + int64_t{head} * head_dim + i;
    float* x2 = x1 + half;
    const float2 rotated = RotatePair(*x1, *x2, cos_table, sin_table, i);
    *x1 = rotated.x;
    *x2 = rotated.y;
  }
}

}  // namespace

cudaError_t LaunchRope(float* x, int64_t rows, int64_t row_stride, int32_t num_heads,
                       int32_t head_dim, const int32_t* positions, const float* inv_freq,
                       cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (!RopeSupportsHeadDim(head_dim)) return cudaErrorInvalidValue;
  const dim3 grid(
      static_cast<unsigned>(rows),
      static_cast<unsigned>(RopeRowParts(rows, int64_t{num_heads} * (head_dim / 2), kThreads)));
  return LaunchKernel(RopeKernel, grid, kThreads, 0, stream, x, row_stride, num_heads, head_dim,
                      positions, inv_freq);
}

}  // namespace pulse::cuda
