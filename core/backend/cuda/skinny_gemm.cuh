// The kernel of cuda::LaunchSkinnyGemm (kernels.h): y[m][n] = x[m][k] * w[n][k]^T + bias for
// the few rows of a decode step, a template over its tiling so that pulse-skinny-gemm-bench can
// compare tilings in one run.
//
// The time is the weight bytes over HBM bandwidth, so the kernel is built to keep enough of w in
// flight and read each byte once: a block owns 16 output features and splits k among its warps;
// each lane streams 16-byte pieces of two weight rows straight into registers (no shared-memory
// staging) and feeds them to mma.sync with the weights as the 16-row A operand and x as the
// 8-column B operand (the few rows of x are re-read from L1). The k order inside a 32-element
// chunk is permuted the same way in A and B (lane group q reads elements 8q..8q+7, which the
// fragment layout calls columns 2q, 2q+1, 2q+8, 2q+9 of two k16 steps), so a lane's loads are
// contiguous. The warps' partial sums meet in shared memory and are added in a fixed order:
// the result does not depend on timing.
#pragma once

#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/mma.cuh"

namespace pulse::cuda::skinny {

inline constexpr int kFeatures = 16;  // output features (rows of w) a block
inline constexpr int kChunk = 32;     // k elements of a row read by its four lanes at once
inline constexpr int kMaxRows = 8;    // rows of x: one mma B tile

// 16 bytes of w, read once: kept out of L1 so that x stays there.
__device__ __forceinline__ uint4 LoadWeights(const void* address) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(address));
  return v;
}

// kUnroll chunks of a lane's two weight rows (features group and group + 8).
template <int kUnroll>
struct WeightStage {
  uint4 low[kUnroll];
  uint4 high[kUnroll];

  // Issues the loads of chunks [first, first + kUnroll) below `end`.
  __device__ __forceinline__ void Load(const bf16* w_low, const bf16* w_high, int64_t first,
                                       int64_t end) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (first + u < end) {
        low[u] = LoadWeights(w_low + (first + u) * kChunk);
        high[u] = LoadWeights(w_high + (first + u) * kChunk);
      }
    }
  }

  // acc += this stage's weights times the rows of x (x_lane: this lane's row and elements).
  __device__ __forceinline__ void Multiply(const bf16* x_lane, bool has_row, int64_t first,
                                           int64_t end, float (&acc)[4]) const {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (first + u >= end) continue;
      const uint32_t a_first[4] = {low[u].x, high[u].x, low[u].y, high[u].y};
      const uint32_t a_second[4] = {low[u].z, high[u].z, low[u].w, high[u].w};
      uint4 b = make_uint4(0, 0, 0, 0);
      if (has_row) b = __ldg(reinterpret_cast<const uint4*>(x_lane + (first + u) * kChunk));
      MmaBf16(acc, a_first, b.x, b.y);
      MmaBf16(acc, a_second, b.z, b.w);
    }
  }
};

// kWarps warps split k; each lane has two stages of kUnroll chunks of two weight rows, one in
// flight while the other is multiplied.
template <int kWarps, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    SkinnyGemmKernel(const bf16* __restrict__ x, int32_t m, const bf16* __restrict__ w, int64_t n,
                     int64_t k, const float* __restrict__ bias, float* __restrict__ y) {
  __shared__ float partial[kWarps][kMaxRows][kFeatures];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int group = lane / 4;  // fragment row (feature) and column (x row) of this lane
  const int quad = lane % 4;   // which 8 elements of a chunk
  const int64_t feature0 = int64_t{blockIdx.x} * kFeatures;

  const int64_t chunks = k / kChunk;
  const int64_t begin = chunks * warp / kWarps;
  const int64_t end = chunks * (warp + 1) / kWarps;
  const bf16* w_low = w + (feature0 + group) * k + quad * 8;
  const bf16* w_high = w_low + 8 * k;  // feature + 8
  const bf16* x_lane = x + int64_t{group} * k + quad * 8;

  const bool has_row = group < m;
  float acc[4] = {};
  WeightStage<kUnroll> even;
  WeightStage<kUnroll> odd;
  even.Load(w_low, w_high, begin, end);
  for (int64_t c0 = begin; c0 < end; c0 += 2 * kUnroll) {
    odd.Load(w_low, w_high, c0 + kUnroll, end);
    even.Multiply(x_lane, has_row, c0, end, acc);
    even.Load(w_low, w_high, c0 + 2 * kUnroll, end);
    odd.Multiply(x_lane, has_row, c0 + kUnroll, end, acc);
  }

  // The fragment: acc[0..1] feature `group`, x rows 2 quad and 2 quad + 1; acc[2..3] the same
  // x rows, feature group + 8.
  partial[warp][2 * quad][group] = acc[0];
  partial[warp][2 * quad + 1][group] = acc[1];
  partial[warp][2 * quad][group + 8] = acc[2];
  partial[warp][2 * quad + 1][group + 8] = acc[3];
  __syncthreads();
  for (int i = threadIdx.x; i < kMaxRows * kFeatures; i += kWarps * 32) {
    const int row = i / kFeatures;
    const int feature = i % kFeatures;
    if (row >= m) break;
    float sum = bias != nullptr ? bias[feature0 + feature] : 0.0f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) sum += partial[v][row][feature];
    y[row * n + feature0 + feature] = sum;
  }
}

}  // namespace pulse::cuda::skinny
