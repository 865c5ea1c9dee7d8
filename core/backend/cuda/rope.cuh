// Rotary embedding pieces shared by the Rope kernel and the fused RoPE + KV append kernel, so
// that both rotate bit for bit alike.
#pragma once

#include "core/backend/cuda/device_math.cuh"

namespace pulse::cuda {

inline constexpr int kRopeMaxHalf = 256;  // head_dim up to 512

// Whether the rope kernels' shared tables fit head_dim (even, at most 2 * kRopeMaxHalf).
inline bool RopeSupportsHeadDim(int32_t head_dim) {
  return head_dim % 2 == 0 && head_dim / 2 <= kRopeMaxHalf;
}

// Blocks a row's `items` rotary pairs are spread over, `threads` a block: enough for a decode
// step's few rows to run a pair a thread, and one (a loop over the row) once the rows alone fill
// the device, where more would only recompute each row's cos/sin.
inline int64_t RopeRowParts(int64_t rows, int64_t items, int64_t threads) {
  constexpr int64_t kSpreadRows = 256;
  const int64_t spread = (kSpreadRows + rows - 1) / rows;
  const int64_t needed = (items + threads - 1) / threads;
  return spread < needed ? spread : needed;
}

// cos_table[i], sin_table[i] (shared memory) of position * inv_freq[i] for i < half, from a
// double-precision angle as the CPU backend computes it. Ends with a barrier.
__device__ __forceinline__ void RopeTables(int32_t position, const float* __restrict__ inv_freq,
                                           int32_t half, float* cos_table, float* sin_table) {
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
    double s = 0.0;
    double c = 0.0;
    sincos(static_cast<double>(position) * static_cast<double>(inv_freq[i]), &s, &c);
    cos_table[i] = static_cast<float>(c);
    sin_table[i] = static_cast<float>(s);
  }
  __syncthreads();
}

// The rotate-half pair (x1, x2) = (x[i], x[i + half]) of channel i rotated by the tables.
__device__ __forceinline__ float2 RotatePair(float x1, float x2, const float* cos_table,
                                             const float* sin_table, int32_t i) {
  return make_float2(x1 * cos_table[i] - x2 * sin_table[i], x2 * cos_table[i] + x1 * sin_table[i]);
}

}  // namespace pulse::cuda
