// The fixed summation order of every CPU op: a sum over n terms accumulates term i into lane
// i % kLanes in index order (the last partial vector zero-padded), then adds the lanes by one
// fixed tree (ReduceLanes). The order depends on n only,
// so a row's result never depends on how a call is batched or split across threads.
//
// Vec is a GCC/Clang vector of kLanes floats, which the compiler lowers to the target's registers
// (one zmm with AVX-512, two ymm with AVX2, ...). Fixed-trip lane loops are fully unrolled so that
// they become single vector instructions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/backend/bf16.h"

#if defined(__FMA__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace pulse::cpu {

inline constexpr int kLanes = 16;
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));
using VecBits = uint32_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));
using VecBf16 = uint16_t __attribute__((vector_size(kLanes * sizeof(uint16_t))));

#define PULSE_UNROLL_LANES _Pragma("GCC unroll 16")

// a * b + c, fused where the target has FMA. The one definition every kernel uses, so every code
// path rounds the same way (the CPU sources are compiled with -ffp-contract=off).
inline float MulAdd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// Lane-wise MulAdd. The compiler does not reliably turn a lane loop of std::fma into vector FMAs
// (it sometimes spills through memory), so targets with FMA get the instruction itself; the
// results are the same fused roundings either way.
inline Vec MulAdd(Vec a, Vec b, Vec c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__FMA__)
  using Vec8 = float __attribute__((vector_size(8 * sizeof(float))));
  const Vec8 low = _mm256_fmadd_ps(__builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7),
                                   __builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7),
                                   __builtin_shufflevector(c, c, 0, 1, 2, 3, 4, 5, 6, 7));
  const Vec8 high = _mm256_fmadd_ps(__builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15),
                                    __builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15),
                                    __builtin_shufflevector(c, c, 8, 9, 10, 11, 12, 13, 14, 15));
  return __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#else
  return a * b + c;  // no FMA: the same two roundings as the scalar MulAdd
#endif
}

inline float ToF32(float value) { return value; }
inline float ToF32(uint16_t bf16_bits) { return Bf16ToF32(bf16_bits); }

// kLanes consecutive values from p (any alignment) as fp32.
inline Vec LoadVec(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline Vec LoadVec(const uint16_t* bf16) {
  VecBf16 halves;
  std::memcpy(&halves, bf16, sizeof(halves));
  VecBits bits;
  PULSE_UNROLL_LANES
  for (int l = 0; l < kLanes; ++l) bits[l] = halves[l];
  return std::bit_cast<Vec>(bits << 16);
}

// The first `count` (< kLanes) values from p, zero in the other lanes: a sum's last partial
// vector. A zero lane adds fma(0, 0, acc) = acc, so padding changes no value.
template <typename T>
Vec LoadPartialVec(const T* p, int64_t count) {
  T padded[kLanes] = {};
  for (int64_t l = 0; l < count; ++l) padded[l] = p[l];
  return LoadVec(padded);
}

// The tree: lanes l and l + 8, then l and l + 4, then l and l + 2, then the last two.
inline float ReduceLanes(Vec acc) {
  using Vec8 = float __attribute__((vector_size(8 * sizeof(float))));
  using Vec4 = float __attribute__((vector_size(4 * sizeof(float))));
  const Vec8 half = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7) +
                    __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
  const Vec4 quarter = __builtin_shufflevector(half, half, 0, 1, 2, 3) +
                       __builtin_shufflevector(half, half, 4, 5, 6, 7);
  return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

// sum_i a[i] in the fixed order.
inline float Sum(const float* a, int64_t n) {
  Vec acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += LoadVec(a + i);
  if (i < n) acc += LoadPartialVec(a + i, n - i);
  return ReduceLanes(acc);
}

// sum_i a[i] * b[i] in the fixed order.
template <typename B>
[[gnu::always_inline]] inline float Dot(const float* a, const B* b, int64_t n) {
  Vec acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = MulAdd(LoadVec(a + i), LoadVec(b + i), acc);
  if (i < n) acc = MulAdd(LoadPartialVec(a + i, n - i), LoadPartialVec(b + i, n - i), acc);
  return ReduceLanes(acc);
}

}  // namespace pulse::cpu
