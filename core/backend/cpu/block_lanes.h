// A block of ggml's 32-value types (Q8_0, Q4_0, Q4_1) as two Vecs of fp32, decoded exactly as the
// GGUF reader decodes them (core/base/ggml_blocks.h: the integer converted to float, times its
// scale, plus its offset, each step rounded on its own; the product is exact, so one fused
// rounding of both steps gives the same value). A GEMM over weights kept in blocks
// therefore computes what it computes over the reader's fp32 weights, bit for bit, while reading a
// quarter to an eighth of the bytes.
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

// GCC 12 reports the undefined vectors that avx512fintrin.h's own intrinsics pass to their masked
// builtins as (maybe) uninitialized; no lane of them is read.
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
#elif defined(__x86_64__)  // the generic level has SSE2: bytes to 16-bit lanes, then to 32
  constexpr bool kSigned = std::is_same_v<BytePart, SignedBytePart>;
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kSigned) {  // each value into a lane's high half, then shifted down with its sign
    const __m128i halves[2] = {_mm_srai_epi16(_mm_unpacklo_epi8(bytes, bytes), 8),
                               _mm_srai_epi16(_mm_unpackhi_epi8(bytes, bytes), 8)};
    for (int half = 0; half < 2; ++half) {
      v.part[2 * half] =
          (IntPart)_mm_srai_epi32(_mm_unpacklo_epi16(halves[half], halves[half]), 16);
      v.part[2 * half + 1] =
          (IntPart)_mm_srai_epi32(_mm_unpackhi_epi16(halves[half], halves[half]), 16);
    }
  } else {
    const __m128i zero = _mm_setzero_si128();
    const __m128i halves[2] = {_mm_unpacklo_epi8(bytes, zero), _mm_unpackhi_epi8(bytes, zero)};
    for (int half = 0; half < 2; ++half) {
      v.part[2 * half] = (IntPart)_mm_unpacklo_epi16(halves[half], zero);
      v.part[2 * half + 1] = (IntPart)_mm_unpackhi_epi16(halves[half], zero);
    }
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

// float(q) * scale (+ offset), lane by lane: the reader's values. The product of a 4- or 8-bit
// integer and a half is exact in fp32, so the fused q * scale + offset rounds once where the
// reader rounds twice, to the same value.
template <bool kOffset>
inline Vec Scaled(const IntVec& q, float scale, float offset) {
  Vec v;
  PULSE_UNROLL_LANES
  for (int part = 0; part < kParts; ++part) {
    const Part value = __builtin_convertvector(q.part[part], Part);
    if constexpr (kOffset) {
      v.part[part] = MulAdd(value, Part{} + scale, Part{} + offset);
    } else {
      v.part[part] = value * scale;
    }
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

// The 32 values of the block at `block`: out[0] the first sixteen, out[1] the others.
template <DType kType>
[[gnu::always_inline]] inline void LoadBlock(const std::byte* block, Vec out[2]) {
  const float d = BlockHalf(block);
  if constexpr (kType == DType::kQ8_0) {
    out[0] = Scaled<false>(WidenBytes<SignedBytePart>(block + 2), d, 0.0f);
    out[1] = Scaled<false>(WidenBytes<SignedBytePart>(block + 18), d, 0.0f);
  } else {
    static_assert(kType == DType::kQ4_0 || kType == DType::kQ4_1);
    // Values j and j + 16 share byte j: the low nibble and the high one.
    const IntVec bytes = WidenBytes<UnsignedBytePart>(block + (kType == DType::kQ4_0 ? 2 : 4));
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
    // A nibble has sixteen values: decode those once (the reader's values) and look every
    // value up, rather than converting and scaling each one.
    __m512 table;
    if constexpr (kType == DType::kQ4_0) {
      table = _mm512_mul_ps(_mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7),
                            _mm512_set1_ps(d));
    } else {
      // The scale and the minimum, two halves side by side, converted in one instruction. q * d
      // is exact (4 bits times 11), so one fused rounding of q * d + m is the reader's two.
      int32_t scale_and_minimum;
      std::memcpy(&scale_and_minimum, block, sizeof(scale_and_minimum));
      const __m512 pairs = _mm512_cvtph_ps(_mm256_set1_epi32(scale_and_minimum));
      table = _mm512_fmadd_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_permute_ps(pairs, 0x00), _mm512_permute_ps(pairs, 0x55));
    }
    // The lookup reads an index's low four bits: the low nibble needs no mask.
    const __m512i nibbles = (__m512i)bytes.part[0];
    out[0].part[0] = _mm512_permutexvar_ps(nibbles, table);
    out[1].part[0] = _mm512_permutexvar_ps(_mm512_srli_epi32(nibbles, 4), table);
#else
    IntVec low;
    IntVec high;
    PULSE_UNROLL_LANES
    for (int part = 0; part < kParts; ++part) {
      low.part[part] = bytes.part[part] & 0x0F;
      high.part[part] = bytes.part[part] >> 4;
      if constexpr (kType == DType::kQ4_0) {
        low.part[part] = low.part[part] - 8;
        high.part[part] = high.part[part] - 8;
      }
    }
    constexpr bool kMinimum = kType == DType::kQ4_1;
    const float m = kMinimum ? BlockHalf(block + 2) : 0.0f;
    out[0] = Scaled<kMinimum>(low, d, m);
    out[1] = Scaled<kMinimum>(high, d, m);
#endif
  }
}

#pragma GCC diagnostic pop

PULSE_CPU_KERNELS_END
