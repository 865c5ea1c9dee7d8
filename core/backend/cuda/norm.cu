// RMSNorm, alone and fused with the residual add: one block per row, fp32 math, bf16 output.
// Rows that fit keep their values in registers; others loop over the row twice.
#include <cstdint>

#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/launch.cuh"

namespace pulse::cuda {
namespace {

constexpr int kThreads = 256;

// kAddResidual: residual += x first, and the norm is of the sum.
template <bool kAddResidual>
__global__ void RmsNormKernel(float* __restrict__ residual, const float* __restrict__ x,
                              const float* __restrict__ weight, int64_t cols, float eps,
                              bf16* __restrict__ y) {
  WaitForPriorGrids();
  __shared__ float partial[kWarp];
  const int64_t row = blockIdx.x;
  const float* in = x + row * cols;
  float* sum_row = kAddResidual ? residual + row * cols : nullptr;
  float squares = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float value = in[c];
    if constexpr (kAddResidual) {
      value += sum_row[c];
      sum_row[c] = value;
    }
    squares += value * value;
  }
  const float total = BlockSum(squares, partial);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
  const float* normed = kAddResidual ? sum_row : in;
  bf16* out = y + row * cols;
  // Each thread reads back only what it wrote itself above: no barrier needed.
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    out[c] = __float2bfloat16_rn(weight[c] * (normed[c] * inv_rms));
  }
}

// Rows of cols = 4 * vecs columns, vecs <= kVecs * kThreads: each thread keeps its float4s in
// registers from the loads to the output, so a row costs one round of loads, not a loop of them
// (decode steps have a few rows, and a row's latency is the kernel's). The norm's weight is a
// model weight, never written by a kernel, so it is loaded before waiting for the grid before.
template <bool kAddResidual, int kVecs>
__global__ void RmsNormInRegistersKernel(float* __restrict__ residual, const float* __restrict__ x,
                                         const float* __restrict__ weight, int32_t vecs, float eps,
                                         bf16* __restrict__ y) {
  __shared__ float partial[kWarp];
  const int64_t row = blockIdx.x;
  float4 w[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int32_t c = static_cast<int32_t>(threadIdx.x) + i * kThreads;
    if (c < vecs) w[i] = reinterpret_cast<const float4*>(weight)[c];
  }
  WaitForPriorGrids();
  const float4* in = reinterpret_cast<const float4*>(x) + row * vecs;
  float4* sum_row = kAddResidual ? reinterpret_cast<float4*>(residual) + row * vecs : nullptr;
  float4 v[kVecs];
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int32_t c = static_cast<int32_t>(threadIdx.x) + i * kThreads;
    if (c >= vecs) continue;
    v[i] = in[c];
    if constexpr (kAddResidual) {
      const float4 r = sum_row[c];
      v[i] = make_float4(v[i].x + r.x, v[i].y + r.y, v[i].z + r.z, v[i].w + r.w);
      sum_row[c] = v[i];
    }
    squares += v[i].x * v[i].x;
    squares += v[i].y * v[i].y;
    squares += v[i].z * v[i].z;
    squares += v[i].w * v[i].w;
  }
  const float total = BlockSum(squares, partial);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(4 * vecs) + eps);
  __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(y + row * 4 * vecs);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int32_t c = static_cast<int32_t>(threadIdx.x) + i * kThreads;
    if (c >= vecs) continue;
    out[2 * c] = __floats2bfloat162_rn(w[i].x * (v[i].x * inv_rms), w[i].y * (v[i].y * inv_rms));
    out[2 * c + 1] =
        __floats2bfloat162_rn(w[i].z * (v[i].z * inv_rms), w[i].w * (v[i].w * inv_rms));
  }
}

bool Aligned(const void* pointer, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

// The registers kernel for rows that fit it (cols a multiple of 4, at most 8 float4s a thread,
// vectors aligned), else the loop kernel.
template <bool kAddResidual>
cudaError_t LaunchNorm(float* residual, const float* x, const float* weight, int64_t rows,
                       int64_t cols, float eps, bf16* y, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(rows);
  const int64_t vecs = cols / 4;
  const auto v = static_cast<int32_t>(vecs);
  if (cols % 4 != 0 || vecs > 8 * kThreads || !Aligned(x, 16) || !Aligned(residual, 16) ||
      !Aligned(weight, 16) || !Aligned(y, 8)) {
    return LaunchKernel(RmsNormKernel<kAddResidual>, grid, kThreads, 0, stream, residual, x, weight,
                        cols, eps, y);
  }
  if (vecs <= kThreads) {
    return LaunchKernel(RmsNormInRegistersKernel<kAddResidual, 1>, grid, kThreads, 0, stream,
                        residual, x, weight, v, eps, y);
  }
  if (vecs <= 2 * kThreads) {
    return LaunchKernel(RmsNormInRegistersKernel<kAddResidual, 2>, grid, kThreads, 0, stream,
                        residual, x, weight, v, eps, y);
  }
  if (vecs <= 4 * kThreads) {
    return LaunchKernel(RmsNormInRegistersKernel<kAddResidual, 4>, grid, kThreads, 0, stream,
                        residual, x, weight, v, eps, y);
  }
  return LaunchKernel(RmsNormInRegistersKernel<kAddResidual, 8>, grid, kThreads, 0, stream,
                      residual, x, weight, v, eps, y);
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* weight, int64_t rows, int64_t cols,
                          float eps, void* y, cudaStream_t stream) {
  return LaunchNorm<false>(nullptr, x, weight, rows, cols, eps, static_cast<bf16*>(y), stream);
}

cudaError_t LaunchAddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows,
                             int64_t cols, float eps, void* y, cudaStream_t stream) {
  return LaunchNorm<true>(residual, x, weight, rows, cols, eps, static_cast<bf16*>(y), stream);
}

}  // namespace pulse::cuda
