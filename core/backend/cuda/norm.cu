// RMSNorm, alone and fused with the residual add: one block per row, fp32 math, bf16 output.
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

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* weight, int64_t rows, int64_t cols,
                          float eps, void* y, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return LaunchKernel(RmsNormKernel<false>, static_cast<unsigned>(rows), kThreads, 0, stream,
                      nullptr, x, weight, cols, eps, static_cast<bf16*>(y));
}

cudaError_t LaunchAddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows,
                             int64_t cols, float eps, void* y, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return LaunchKernel(RmsNormKernel<true>, static_cast<unsigned>(rows), kThreads, 0, stream,
                      residual, x, weight, cols, eps, static_cast<bf16*>(y));
}

}  // namespace pulse::cuda
