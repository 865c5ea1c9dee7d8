// The fixed summation order of every CPU op: a sum over n terms accumulates term i into lane
// i % kLanes in index order (the last partial vector zero-padded), then adds the lanes by one
// fixed tree (ReduceLanes). The order depends on n only,
// so a row's result never depends on how a call is batched or split across threads.
//
// Fixed-trip lane loops are fully unrolled so that they become single vector instructions.
#pragma once

#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/backend/bf16.h"
#include "core/backend/cpu/kernel_target.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

PULSE_CPU_KERNELS_BEGIN

inline constexpr int kLanes = 16;

// A Vec is kLanes floats in the level's widest registers: one zmm (AVX-512), two ymm (AVX2) or
// four xmm (generic). The compiler's own 16-float vectors are lowered well only where one
// register holds them, so the narrower levels keep the parts as an array.
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
inline constexpr int kPartLanes = 16;
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
inline constexpr int kPartLanes = 8;
#else
inline constexpr int kPartLanes = 4;
#endif
inline constexpr int kParts = kLanes / kPartLanes;
using Part = float __attribute__((vector_size(kPartLanes * sizeof(float))));

#define PULSE_UNROLL_LANES _Pragma("GCC unroll 16")

struct Vec {
  Part part[kParts];

  float operator[](int lane) const { return part[lane / kPartLanes][lane % kPartLanes]; }
  Vec& operator+=(const Vec& other) {
    PULSE_UNROLL_LANES
    for (int p = 0; p < kParts; ++p) part[p] += other.part[p];
    return *this;
  }
};

// Every lane of a Part `value`.
inline Part Broadcast(float value) {
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
  return _mm512_set1_ps(value);
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
  return _mm256_set1_ps(value);
#else
  return _mm_set1_ps(value);
#endif
}

// a * b + c, fused at the levels with FMA. The one definition every kernel uses, so every code
// path of a level rounds the same way (the CPU sources are compiled with -ffp-contract=off).
inline float MulAdd(float a, float b, float c) {
#if PULSE_CPU_HAS_FMA
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// Lane-wise MulAdd. The compiler does not reliably turn a lane loop of fused multiply-adds into
// vector FMAs (it sometimes spills through memory), so the levels with FMA get the instruction
// itself; the results are the same fused roundings either way.
inline Part MulAdd(Part a, Part b, Part c) {
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
  return _mm512_fmadd_ps(a, b, c);
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;  // no FMA: the same two roundings as the scalar MulAdd
#endif
}
inline Vec MulAdd(const Vec& a, const Vec& b, const Vec& c) {
  Vec v;
  PULSE_UNROLL_LANES
  for (int p = 0; p < kParts; ++p) v.part[p] = MulAdd(a.part[p], b.part[p], c.part[p]);
  return v;
}

inline float ToF32(float value) { return value; }
inline float ToF32(uint16_t bf16_bits) { return Bf16ToF32(bf16_bits); }

// kLanes consecutive values from p (any alignment) as fp32.
inline Vec LoadVec(const float* p) {
  // Part by part: one copy of the whole Vec goes through the stack in narrower pieces.
  Vec v;
  PULSE_UNROLL_LANES
  for (int part = 0; part < kParts; ++part) {
    std::memcpy(&v.part[part], p + part * kPartLanes, sizeof(Part));
  }
  return v;
}
inline Vec LoadVec(const uint16_t* bf16) {
  using PartBits = uint32_t __attribute__((vector_size(kPartLanes * sizeof(uint32_t))));
  using PartBf16 = uint16_t __attribute__((vector_size(kPartLanes * sizeof(uint16_t))));
  Vec v;
  PULSE_UNROLL_LANES
  for (int p = 0; p < kParts; ++p) {
    PartBf16 halves;
    std::memcpy(&halves, bf16 + p * kPartLanes, sizeof(halves));
    PartBits bits;
    PULSE_UNROLL_LANES
    for (int l = 0; l < kPartLanes; ++l) bits[l] = halves[l];
    const PartBits shifted = bits << 16;
    std::memcpy(&v.part[p], &shifted, sizeof(Part));  // std::bit_cast is not of this level
  }
  return v;
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
inline float ReduceLanes(const Vec& acc) {
  using Vec4 = float __attribute__((vector_size(4 * sizeof(float))));
#if PULSE_CPU_LEVEL != PULSE_CPU_LEVEL_GENERIC
  using Vec8 = float __attribute__((vector_size(8 * sizeof(float))));
#endif
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
  const Part& all = acc.part[0];
  const Vec8 half = __builtin_shufflevector(all, all, 0, 1, 2, 3, 4, 5, 6, 7) +
                    __builtin_shufflevector(all, all, 8, 9, 10, 11, 12, 13, 14, 15);
  const Vec4 quarter = __builtin_shufflevector(half, half, 0, 1, 2, 3) +
                       __builtin_shufflevector(half, half, 4, 5, 6, 7);
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
  const Vec8 half = acc.part[0] + acc.part[1];
  const Vec4 quarter = __builtin_shufflevector(half, half, 0, 1, 2, 3) +
                       __builtin_shufflevector(half, half, 4, 5, 6, 7);
#else
  const Vec4 quarter = (acc.part[0] + acc.part[2]) + (acc.part[1] + acc.part[3]);
#endif
  return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
// Lane j of the result is ReduceLanes of v[j], bit for bit: the same tree, run on sixteen
// vectors at once (each level adds the halves it keeps of two vectors in one instruction), 15
// additions instead of 16 trees of four levels.
inline Part ReduceLanes16(const Part (&v)[16]) {
  Part half[8];
  for (int j = 0; j < 8; ++j) {
    half[j] = __builtin_shufflevector(v[2 * j], v[2 * j + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18,
                                      19, 20, 21, 22, 23) +
              __builtin_shufflevector(v[2 * j], v[2 * j + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                      26, 27, 28, 29, 30, 31);
  }
  Part quarter[4];
  for (int j = 0; j < 4; ++j) {
    quarter[j] = __builtin_shufflevector(half[2 * j], half[2 * j + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16,
                                         17, 18, 19, 24, 25, 26, 27) +
                 __builtin_shufflevector(half[2 * j], half[2 * j + 1], 4, 5, 6, 7, 12, 13, 14, 15,
                                         20, 21, 22, 23, 28, 29, 30, 31);
  }
  Part pairs[2];
  for (int j = 0; j < 2; ++j) {
    pairs[j] = __builtin_shufflevector(quarter[2 * j], quarter[2 * j + 1], 0, 1, 4, 5, 8, 9, 12, 13,
                                       16, 17, 20, 21, 24, 25, 28, 29) +
               __builtin_shufflevector(quarter[2 * j], quarter[2 * j + 1], 2, 3, 6, 7, 10, 11, 14,
                                       15, 18, 19, 22, 23, 26, 27, 30, 31);
  }
  return __builtin_shufflevector(pairs[0], pairs[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                 26, 28, 30) +
         __builtin_shufflevector(pairs[0], pairs[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25,
                                 27, 29, 31);
}
#endif

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

// Calls fn(std::integral_constant<int, n>{}) for n in 1..4: a kernel templated on how many heads
// share its loads, for the heads left.
template <typename Fn>
void WithHeads(int32_t n, Fn&& fn) {
  assert(n >= 1 && n <= 4);
  [&]<int... kN>(std::integer_sequence<int, kN...>) {
    ((n == kN + 1 ? fn(std::integral_constant<int, kN + 1>{}) : void()), ...);
  }
  (std::make_integer_sequence<int, 4>{});
}

PULSE_CPU_KERNELS_END
