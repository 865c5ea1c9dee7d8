// Small device helpers shared by the CUDA backend's kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pulse::cuda {

using bf16 = __nv_bfloat16;

constexpr int kWarp = 32;

struct Add {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

// fmaxf: a NaN operand is skipped.
struct MaxFloat {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// `op` over a warp's values (butterfly order); every lane gets it.
template <typename T, typename Op>
__device__ __forceinline__ T WarpReduce(T value, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// 2^x by the special-function unit alone (ex2.approx.ftz: about 2 ulp, subnormal results flushed
// to zero), where exp2f adds range handling around it.
__device__ __forceinline__ float FastExp2(float x) {
  float result;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(result) : "f"(x));
  return result;
}

__device__ __forceinline__ float WarpSum(float value) { return WarpReduce(value, Add{}); }

// `op` over a block of blockDim.x threads (a multiple of 32, at most 1024), `identity` its
// neutral value; every thread gets it. `shared` holds a value a warp. Ends with a barrier, so
// `shared` may be reused at once.
template <typename T, typename Op>
__device__ __forceinline__ T BlockReduce(T value, T identity, Op op, T* shared) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  value = WarpReduce(value, op);
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  T total = lane < warps ? shared[lane] : identity;
  total = WarpReduce(total, op);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float BlockSum(float value, float* shared) {
  return BlockReduce(value, 0.0f, Add{}, shared);
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
