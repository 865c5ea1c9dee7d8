// Sixteen consecutive values of a row of ggml's 32-value blocks (Q8_0, Q4_0, Q4_1) as a Vec of
// fp32, decoded exactly as the GGUF reader decodes them (core/base/ggml_blocks.h: the integer
// converted to float, times its scale, plus its offset, each step rounded on its own). A GEMM over
// weights kept in blocks therefore computes what it computes over the reader's fp32 weights, bit
// for bit, while reading a quarter to an eighth of the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/backend/cpu/kernel_target.h"
#include "core/backend/cpu/lanes.h"
#include "core/backend/dtype.h"
#include "core/base/ggml_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

PULSE_CPU_KERNELS_BEGIN

// Sixteen int32 lanes in the parts of a Vec.
using IntPart = int32_t __attribute__((vector_size(kPartLanes * sizeof(int32_t))));
struct IntVec {
  IntPart part[kParts];
};

using UnsignedBytePart = uint8_t __attribute__((vector_size(kPartLanes)));
using SignedBytePart = int8_t __attribute__((vector_size(kPartLanes)));

// GCC 12 reports the undefined vectors that avx512fintrin.h's own widening intrinsics pass to
// their masked builtins as (maybe) uninitialized; no lane of them is read.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Sixteen bytes at `p` widened to int32 lanes, as unsigned (UnsignedBytePart) or signed bytes.
// The vector levels name the widening instruction: GCC lowers __builtin_convertvector of bytes
// lane by lane.
template <typename BytePart>
inline IntVec WidenBytes(const std::byte* p) {
  IntVec v;
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
  constexpr bool kSigned = std::is_same_v<BytePart, SignedBytePart>;
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  v.part[0] = (IntPart)(kSigned ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes));
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
  constexpr bool kSigned = std::is_same_v<BytePart, SignedBytePart>;
  PULSE_UNROLL_LANES
  for (int part = 0; part < kParts; ++part) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + part * kPartLanes));
    v.part[part] = (IntPart)(kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
  }
#else
  PULSE_UNROLL_LANES
  for (int part = 0; part < kParts; ++part) {
    BytePart bytes;
    std::memcpy(&bytes, p + part * kPartLanes, sizeof(bytes));
    v.part[part] = __builtin_convertvector(bytes, IntPart);
  }
#endif
  return v;
}
#pragma GCC diagnostic pop

// (bytes at `p` >> shift) & mask, lane by lane.
inline IntVec BitField(const std::byte* p, int shift, int32_t mask) {
  IntVec v = WidenBytes<UnsignedBytePart>(p);
  PULSE_UNROLL_LANES
  for (int part = 0; part < kParts; ++part) v.part[part] = (v.part[part] >> shift) & mask;
  return v;
}

// float(q) * scale (+ offset), lane by lane: the reader's two roundings.
template <bool kOffset>
inline Vec Scaled(const IntVec& q, float scale, float offset) {
  Vec v;
  PULSE_UNROLL_LANES
  for (int part = 0; part < kParts; ++part) {
    v.part[part] = __builtin_convertvector(q.part[part], Part) * scale;
    if constexpr (kOffset) v.part[part] = v.part[part] + offset;
  }
  return v;
}

inline float BlockHalf(const std::byte* p) {
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_GENERIC
  return LoadHalf(p);
#else
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));  // exact, as LoadHalf
#endif
}

// Values kk..kk + 15 of the row at `row` (kk a multiple of 16).
template <DType kType>
[[gnu::always_inline]] inline Vec LoadBlockVec(const std::byte* row, int64_t kk) {
  const std::byte* block = row + kk / BlockTypeValues(kType) * BlockTypeBytes(kType);
  const auto v0 = static_cast<int>(kk % BlockTypeValues(kType));  // first value in the block
  if constexpr (kType == DType::kQ8_0) {
    return Scaled<false>(WidenBytes<SignedBytePart>(block + 2 + v0), BlockHalf(block), 0.0f);
  } else {
    static_assert(kType == DType::kQ4_0 || kType == DType::kQ4_1);
    // Values j and j + 16 share byte j: the low nibble and the high one.
    const int qs = kType == DType::kQ4_0 ? 2 : 4;
    IntVec q = BitField(block + qs, v0 == 0 ? 0 : 4, 0x0F);
    if constexpr (kType == DType::kQ4_0) {
      PULSE_UNROLL_LANES
      for (int part = 0; part < kParts; ++part) q.part[part] = q.part[part] - 8;
      return Scaled<false>(q, BlockHalf(block), 0.0f);
    } else {
      return Scaled<true>(q, BlockHalf(block), BlockHalf(block + 2));
    }
  }
}

PULSE_CPU_KERNELS_END
