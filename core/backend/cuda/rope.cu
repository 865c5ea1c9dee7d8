// Rotary embedding (rotate-half convention) in place, one block per row: the row's cos/sin are
// computed once in shared memory from a double-precision angle, then applied to every head.
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"

namespace pulse::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHalf = 256;  // head_dim up to 512

__global__ void RopeKernel(float* __restrict__ x, int64_t row_stride, int32_t num_heads,
                           int32_t head_dim, const int32_t* __restrict__ positions,
                           const float* __restrict__ inv_freq) {
  __shared__ float cos_table[kMaxHalf];
  __shared__ float sin_table[kMaxHalf];
  const int64_t row = blockIdx.x;
  const int32_t half = head_dim / 2;
  const double position = static_cast<double>(positions[row]);
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
    double s = 0.0;
    double c = 0.0;
    sincos(position * static_cast<double>(inv_freq[i]), &s, &c);
    cos_table[i] = static_cast<float>(c);
    sin_table[i] = static_cast<float>(s);
  }
  __syncthreads();
  float* base = x + row * row_stride;
  for (int32_t item = threadIdx.x; item < num_heads * half; item += blockDim.x) {
    const int32_t head = item / half;
    const int32_t i = item % half;
    float* x1 = base + int64_t{head} * head_dim + i;
    float* x2 = x1 + half;
    const float a = *x1;
    const float b = *x2;
    *x1 = a * cos_table[i] - b * sin_table[i];
    *x2 = b * cos_table[i] + a * sin_table[i];
  }
}

}  // namespace

cudaError_t LaunchRope(float* x, int64_t rows, int64_t row_stride, int32_t num_heads,
                       int32_t head_dim, const int32_t* positions, const float* inv_freq,
                       cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (head_dim / 2 > kMaxHalf || head_dim % 2 != 0) return cudaErrorInvalidValue;
  RopeKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, row_stride, num_heads,
                                                                   head_dim, positions, inv_freq);
  return cudaGetLastError();
}

}  // namespace pulse::cuda
