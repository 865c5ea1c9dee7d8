// Small device helpers shared by the CUDA backend's kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pulse::cuda {

using bf16 = __nv_bfloat16;

constexpr int kWarp = 32;

__device__ __forceinline__ float WarpSum(float value) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
// `shared` holds 32 floats. Ends with a barrier, so `shared` may be reused at once.
__device__ __forceinline__ float BlockSum(float value, float* shared) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  value = WarpSum(value);
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  float total = lane < warps ? shared[lane] : 0.0f;
  total = WarpSum(total);
  __syncthreads();
  return total;
}

// Eight bf16 values in one 16-byte word.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 pairs[4];
};

__device__ __forceinline__ void Unpack(const Bf16x8& packed, float (&out)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = __bfloat1622float2(packed.pairs[i]);
    out[2 * i] = pair.x;
    out[2 * i + 1] = pair.y;
  }
}

__device__ __forceinline__ Bf16x8 Pack(const float (&values)[8]) {
  Bf16x8 packed;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    packed.pairs[i] = __floats2bfloat162_rn(values[2 * i], values[2 * i + 1]);
  }
  return packed;
}

__host__ __device__ __forceinline__ int64_t CeilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace pulse::cuda
