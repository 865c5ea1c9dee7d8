#include "core/backend/cpu/kquant_gemm.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/base/ggml_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pulse::cpu {
namespace {

constexpr int kBlockLanes = 8;  // of four values each
// How far ahead of the block being multiplied the vector kernels prefetch the weights: a decode
// step streams them from memory once, in rows too short for the hardware prefetcher to ramp up.
constexpr int64_t kPrefetchBytes = 4096;

// The rows of x as q8 blocks: block b of row r at index r * blocks + b of each array.
struct QuantizedRows {
  std::vector<int8_t> qs;  // 32 a block
  std::vector<float> d8;   // each block's scale d, eight times: the vector kernels' lanes
  std::vector<float> sum;  // d times the sum of the block's qs (a weight minimum multiplies it)
};

// One row of QuantizedRows.
struct XRow {
  const int8_t* qs;
  const float* d8;
  const float* sum;
};

void QuantizeRow(const float* x, int64_t blocks, int8_t* qs, float* d8, float* sums) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float* v = x + b * kGgmlBlockValues;
    float amax = 0.0f;
    for (int j = 0; j < kGgmlBlockValues; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    std::fill_n(d8 + b * kBlockLanes, kBlockLanes, d);
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kGgmlBlockValues; ++j) {
      const auto q = static_cast<int8_t>(std::nearbyint(v[j] * inverse));
      qs[b * kGgmlBlockValues + j] = q;
      sum += q;
    }
    sums[b] = d * static_cast<float>(sum);
  }
}

// Whether a type's weights are unsigned integers with a minimum subtracted (Q4_K's dmin * m),
// rather than signed integers (Q6_K's).
constexpr bool HasMinimum(DType type) { return type == DType::kQ4_K; }

// The 32-value blocks of a super-block.
constexpr int64_t kSubBlocks = kGgmlSuperBlockValues / kGgmlBlockValues;

// A 32-value block of weights: its integers (Q6_K's less 32), the scale of lanes 0-3 and of
// lanes 4-7 (Q6_K's two 16-value sub-blocks differ), and the minimum.
struct WBlock {
  std::array<int8_t, kGgmlBlockValues> qs;
  float d;
  float d_high;
  float m;
};

// Sub-block j of a block_q4_K: d * sc and -(dmin * m).
void UnpackQ4_K(const std::byte* block, int j, WBlock& w) {
  uint8_t sc;
  uint8_t m;
  Q4_KScaleMin(j, reinterpret_cast<const uint8_t*>(block + 4), &sc, &m);
  w.d = LoadHalf(block) * sc;
  w.d_high = w.d;
  w.m = -(LoadHalf(block + 2) * m);
  for (int l = 0; l < kGgmlBlockValues; ++l) {
    w.qs[static_cast<size_t>(l)] = static_cast<int8_t>(Q4_KQuant(block, 32 * j + l));
  }
}

// Sub-block j of a block_q6_K: values 0-15 scaled by d * scales[2j], 16-31 by d * scales[2j + 1].
void UnpackQ6_K(const std::byte* block, int j, WBlock& w) {
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = LoadHalf(block + 208);
  w.d = d * scales[2 * j];
  w.d_high = d * scales[2 * j + 1];
  for (int l = 0; l < kGgmlBlockValues; ++l) {
    w.qs[static_cast<size_t>(l)] = static_cast<int8_t>(Q6_KQuant(block, 32 * j + l));
  }
}

// The 32-value block b of a weight row.
WBlock UnpackBlock(DType type, const std::byte* w_row, int64_t b) {
  const std::byte* block = w_row + b / kSubBlocks * BlockTypeBytes(type);
  const auto sub_block = static_cast<int>(b % kSubBlocks);
  WBlock w{};
  if (type == DType::kQ4_K) {
    UnpackQ4_K(block, sub_block, w);
  } else {
    UnpackQ6_K(block, sub_block, w);
  }
  return w;
}

// A weight row as the vector kernels read it: its blocks and its 32-value blocks' scales, decoded
// once for every row of x: Q4_K's block b scales all its lanes by d[b] and its minimum is m[b];
// Q6_K's scales lanes 0-3 by d[2b] and lanes 4-7 by d[2b + 1].
struct WRow {
  const std::byte* bytes;
  const float* d;
  const float* m;
};

// The fixed lane tree over eight lanes: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
float ReduceBlockLanes(const float* lanes) {
  const float a0 = lanes[0] + lanes[4];
  const float a1 = lanes[1] + lanes[5];
  const float a2 = lanes[2] + lanes[6];
  const float a3 = lanes[3] + lanes[7];
  return (a0 + a2) + (a1 + a3);
}

// Even blocks accumulate into lanes 0-7, odd ones into lanes 8-15 (the vector kernels' order).
float DotScalar(DType type, const std::byte* w_row, const XRow& x, int64_t blocks) {
  std::array<float, 2 * kBlockLanes> lanes{};
  float minimum = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const WBlock w = UnpackBlock(type, w_row, b);
    const float scale = w.d * x.d8[b * kBlockLanes];
    const float scale_high = w.d_high * x.d8[b * kBlockLanes];
    const int8_t* xq = x.qs + b * kGgmlBlockValues;
    float* block_lanes = lanes.data() + (b % 2) * kBlockLanes;
    for (int l = 0; l < kBlockLanes; ++l) {
      int32_t sum = 0;
      for (int j = 4 * l; j < 4 * l + 4; ++j) sum += int32_t{w.qs[static_cast<size_t>(j)]} * xq[j];
      block_lanes[l] = std::fma(static_cast<float>(sum), l < kBlockLanes / 2 ? scale : scale_high,
                                block_lanes[l]);
    }
    if (HasMinimum(type)) minimum = std::fma(w.m, x.sum[b], minimum);
  }
  std::array<float, kBlockLanes> folded{};
  for (int l = 0; l < kBlockLanes; ++l) folded[l] = lanes[l] + lanes[l + kBlockLanes];
  return ReduceBlockLanes(folded.data()) + minimum;
}

#if defined(__x86_64__)
#define PULSE_AVX2 __attribute__((target("avx2,f16c,fma")))

PULSE_AVX2 inline float HalfAvx2(const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
}

// The 32 bytes at `p`, each shifted right by `shift` bits and masked with `mask`.
PULSE_AVX2 inline __m256i LoadBits(const std::byte* p, int shift, char mask) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(mask));
}

// A 32-value block of weights as unsigned bytes for maddubs and dpbusd, with the signs to move
// onto x: Q4_K's nibbles are unsigned already; Q6_K's signed values (less 32) go in as |w| against
// x * sign(w) (|w| <= 32, |x| <= 127: maddubs's pair sums stay within int16). d holds each lane's
// scale (lanes 4-7 differ from 0-3 for Q6_K).
template <DType kType>
struct UnpackedAvx2 {
  __m256i magnitude;
  __m256i sign;
  __m256 d;
  float m;
};

// Sub-block j's nibbles of a block_q4_K.
PULSE_AVX2 inline __m256i Q4_KNibblesAvx2(const std::byte* block, int j) {
  return LoadBits(block + 16 + 32 * (j / 2), 4 * (j % 2), 0x0F);
}

// Sub-block j's values less 32 of a block_q6_K (Q6_KQuant's layout).
PULSE_AVX2 inline __m256i Q6_KValuesAvx2(const std::byte* block, int j) {
  const int n = j / 4;
  const int k = j % 4;
  const __m256i low = LoadBits(block + 64 * n + 32 * (k % 2), 4 * (k / 2), 0x0F);
  const __m256i high = LoadBits(block + 128 + 32 * n, 2 * k, 3);
  return _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
}

// The eight 6-bit scales and minima of a block_q4_K's 12 packed bytes, a byte each: bytes 0-3
// hold scales 0-3 in their low six bits and the top two bits of scales 4-7, bytes 4-7 the same for
// the minima, bytes 8-11 the low four bits of scales 4-7 (low nibbles) and of minima 4-7.
void UnpackQ4_KScalesMins(const std::byte* packed, uint8_t* scales, uint8_t* mins) {
  uint32_t word[3];
  std::memcpy(word, packed, sizeof(word));
  const uint32_t scales_low = word[0] & 0x3F3F3F3F;
  const uint32_t scales_high = (word[2] & 0x0F0F0F0F) | ((word[0] >> 2) & 0x30303030);
  const uint32_t mins_low = word[1] & 0x3F3F3F3F;
  const uint32_t mins_high = ((word[2] >> 4) & 0x0F0F0F0F) | ((word[1] >> 2) & 0x30303030);
  std::memcpy(scales, &scales_low, 4);
  std::memcpy(scales + 4, &scales_high, 4);
  std::memcpy(mins, &mins_low, 4);
  std::memcpy(mins + 4, &mins_high, 4);
}

// The eight values of the bytes at `p` as floats times `scale` (unsigned or signed bytes).
template <bool kSigned>
PULSE_AVX2 inline __m256 ScaledBytesAvx2(const void* p, float scale) {
  const __m128i bytes = _mm_loadl_epi64(static_cast<const __m128i*>(p));
  const __m256i ints = kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
  return _mm256_mul_ps(_mm256_cvtepi32_ps(ints), _mm256_set1_ps(scale));
}

// WRow's scales of a row of `blocks` 32-value blocks, into d (blocks floats for Q4_K,
// 2 * blocks for Q6_K) and m (Q4_K's blocks floats).
template <DType kType>
PULSE_AVX2 void DecodeRowScalesAvx2(const std::byte* w_row, int64_t blocks, float* d, float* m) {
  for (int64_t g = 0; g < blocks / kSubBlocks; ++g) {
    const std::byte* block = w_row + g * BlockTypeBytes(kType);
    if constexpr (kType == DType::kQ4_K) {
      uint32_t halves;
      std::memcpy(&halves, block, sizeof(halves));
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(halves)));
      uint8_t scales[8];
      uint8_t mins[8];
      UnpackQ4_KScalesMins(block + 4, scales, mins);
      _mm256_storeu_ps(d + 8 * g, ScaledBytesAvx2<false>(scales, _mm_cvtss_f32(dm)));
      const __m256 min = ScaledBytesAvx2<false>(mins, _mm_cvtss_f32(_mm_movehdup_ps(dm)));
      _mm256_storeu_ps(m + 8 * g, _mm256_xor_ps(min, _mm256_set1_ps(-0.0f)));
    } else {
      const float scale = HalfAvx2(block + 208);
      _mm256_storeu_ps(d + 16 * g, ScaledBytesAvx2<true>(block + 192, scale));
      _mm256_storeu_ps(d + 16 * g + 8, ScaledBytesAvx2<true>(block + 200, scale));
    }
  }
}

// The 32-value block b of a weight row.
template <DType kType>
PULSE_AVX2 inline UnpackedAvx2<kType> UnpackAvx2(const WRow& w_row, int64_t b) {
  const std::byte* block = w_row.bytes + b / kSubBlocks * BlockTypeBytes(kType);
  const auto sub_block = static_cast<int>(b % kSubBlocks);
  UnpackedAvx2<kType> w{};
  if constexpr (kType == DType::kQ4_K) {
    w.d = _mm256_broadcast_ss(w_row.d + b);
    w.m = w_row.m[b];
    w.magnitude = Q4_KNibblesAvx2(block, sub_block);
  } else {
    w.d =
        _mm256_setr_m128(_mm_broadcast_ss(w_row.d + 2 * b), _mm_broadcast_ss(w_row.d + 2 * b + 1));
    const __m256i values = Q6_KValuesAvx2(block, sub_block);
    w.magnitude = _mm256_sign_epi8(values, values);
    w.sign = values;
  }
  return w;
}

// One block of weights against one block of x: lane l's integer sum of values 4l..4l+3.
template <DType kType>
PULSE_AVX2 inline __m256 BlockSumsAvx2(const UnpackedAvx2<kType>& w, const int8_t* xq) {
  __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  if constexpr (!HasMinimum(kType)) xv = _mm256_sign_epi8(xv, w.sign);
  const __m256i pairs = _mm256_maddubs_epi16(w.magnitude, xv);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

PULSE_AVX2 inline float FoldLanes(__m256 even, __m256 odd) {
  alignas(32) float values[kBlockLanes];
  _mm256_store_ps(values, _mm256_add_ps(even, odd));
  return ReduceBlockLanes(values);
}

// Up to kRows rows of x against one weight row, each weight block unpacked once for all of them;
// even blocks into one accumulator, odd ones into another.
template <DType kType, int kRows>
PULSE_AVX2 void DotRowsAvx2(const WRow& w_row, const XRow* x, int64_t blocks, float* out) {
  // Bytes a 32-value block takes, near enough for a prefetch distance.
  constexpr int64_t kBytes = BlockTypeBytes(kType) / kSubBlocks;
  __m256 lanes[2][kRows];
  float minimum[kRows];
  for (int r = 0; r < kRows; ++r) {
    lanes[0][r] = _mm256_setzero_ps();
    lanes[1][r] = _mm256_setzero_ps();
    minimum[r] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(w_row.bytes + b * kBytes) + kPrefetchBytes,
                 _MM_HINT_T0);
    const UnpackedAvx2<kType> w = UnpackAvx2<kType>(w_row, b);
    __m256* acc = lanes[b % 2];
    for (int r = 0; r < kRows; ++r) {
      const __m256 sums = BlockSumsAvx2<kType>(w, x[r].qs + b * kGgmlBlockValues);
      const __m256 scale = _mm256_mul_ps(w.d, _mm256_loadu_ps(x[r].d8 + b * kBlockLanes));
      acc[r] = _mm256_fmadd_ps(sums, scale, acc[r]);
      if constexpr (HasMinimum(kType)) minimum[r] = std::fma(w.m, x[r].sum[b], minimum[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = FoldLanes(lanes[0][r], lanes[1][r]) + minimum[r];
}

struct Avx2Kernel {
  template <DType kType>
  PULSE_AVX2 static void DecodeRowScales(const std::byte* w_row, int64_t blocks, float* d,
                                         float* m) {
    DecodeRowScalesAvx2<kType>(w_row, blocks, d, m);
  }
  template <DType kType, int kRows>
  PULSE_AVX2 static void Run(const WRow& w_row, const XRow* x, int64_t blocks, float* out) {
    DotRowsAvx2<kType, kRows>(w_row, x, blocks, out);
  }
};

// GCC 12 reports the undefined vectors that avx512fintrin.h's own intrinsics pass to their masked
// builtins as (maybe) uninitialized; nothing here reads an undefined lane.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#define PULSE_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,f16c,fma")))

// The 32-value blocks b (even) and b + 1 of a weight row, in the low and the high 256 bits, as
// UnpackedAvx2 has them (Q6_K's signs as a mask).
struct UnpackedPair {
  __m512i magnitude;
  __mmask64 negative;
  __m512 d;
  float m[2];
};

// A pair of 32-value blocks shares its bytes: Q4_K's are the low and high nibbles of the
// same 32 bytes, Q6_K's take the same nibble of 64 consecutive ql bytes and neighbouring bit pairs
// of the same 32 qh bytes.
template <DType kType>
PULSE_AVX512_VNNI inline UnpackedPair UnpackPairAvx512(const WRow& w_row, int64_t b) {
  UnpackedPair pair{};
  const std::byte* block = w_row.bytes + b / kSubBlocks * BlockTypeBytes(kType);
  const auto j = static_cast<int>(b % kSubBlocks);
  if constexpr (kType == DType::kQ4_K) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16 + 16 * j));
    pair.magnitude = _mm512_and_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1),
        _mm512_set1_epi8(0x0F));
    pair.d = _mm512_insertf32x8(_mm512_set1_ps(w_row.d[b]), _mm256_set1_ps(w_row.d[b + 1]), 1);
    pair.m[0] = w_row.m[b];
    pair.m[1] = w_row.m[b + 1];
  } else {
    const int n = j / 4;
    const int k = j % 4;  // 0 or 2
    const __m512i ql = _mm512_loadu_si512(block + 64 * n);
    const __m512i low =
        _mm512_and_si512(_mm512_srl_epi16(ql, _mm_cvtsi32_si128(2 * k)), _mm512_set1_epi8(0x0F));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 128 + 32 * n));
    const __m512i high = _mm512_and_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k))),
                           _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k + 2)), 1),
        _mm512_set1_epi8(3));
    const __m512i values =
        _mm512_sub_epi8(_mm512_or_si512(low, _mm512_slli_epi16(high, 4)), _mm512_set1_epi8(32));
    pair.magnitude = _mm512_abs_epi8(values);
    pair.negative = _mm512_movepi8_mask(values);
    const __m512i lanes = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    pair.d = _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(_mm_loadu_ps(w_row.d + 2 * b)));
  }
  return pair;
}

// Two blocks at once (a row's blocks come in eights): the even one in the low 256 bits, the odd one
// in the high, so a lane of the 512-bit accumulator is one of the sixteen lanes of the fixed order.
template <DType kType, int kRows>
PULSE_AVX512_VNNI void DotRowsAvx512Vnni(const WRow& w_row, const XRow* x, int64_t blocks,
                                         float* out) {
  constexpr int64_t kBytes = BlockTypeBytes(kType) / kSubBlocks;  // for the prefetch
  __m512 lanes[kRows];
  float minimum[kRows];
  for (int r = 0; r < kRows; ++r) {
    lanes[r] = _mm512_setzero_ps();
    minimum[r] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; b += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(w_row.bytes + b * kBytes) + kPrefetchBytes,
                 _MM_HINT_T0);
    const UnpackedPair w = UnpackPairAvx512<kType>(w_row, b);
    for (int r = 0; r < kRows; ++r) {
      __m512i xv = _mm512_loadu_si512(x[r].qs + b * kGgmlBlockValues);
      if constexpr (!HasMinimum(kType)) {
        xv = _mm512_mask_sub_epi8(xv, w.negative, _mm512_setzero_si512(), xv);
      }
      const __m512 sums =
          _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w.magnitude, xv));
      const __m512 scale = _mm512_mul_ps(w.d, _mm512_loadu_ps(x[r].d8 + b * kBlockLanes));
      lanes[r] = _mm512_fmadd_ps(sums, scale, lanes[r]);
      if constexpr (HasMinimum(kType)) {
        minimum[r] = std::fma(w.m[0], x[r].sum[b], minimum[r]);
        minimum[r] = std::fma(w.m[1], x[r].sum[b + 1], minimum[r]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const __m256 even = _mm512_castps512_ps256(lanes[r]);
    const __m256 odd = _mm512_extractf32x8_ps(lanes[r], 1);
    out[r] = FoldLanes(even, odd) + minimum[r];
  }
}

struct Avx512VnniKernel {
  template <DType kType>
  PULSE_AVX512_VNNI static void DecodeRowScales(const std::byte* w_row, int64_t blocks, float* d,
                                                float* m) {
    DecodeRowScalesAvx2<kType>(w_row, blocks, d, m);
  }
  template <DType kType, int kRows>
  PULSE_AVX512_VNNI static void Run(const WRow& w_row, const XRow* x, int64_t blocks, float* out) {
    DotRowsAvx512Vnni<kType, kRows>(w_row, x, blocks, out);
  }
};
#pragma GCC diagnostic pop
#endif

// Every row of x against one weight row, four rows at a time, the row's scales decoded into
// `scales` (3 * blocks floats) first.
template <typename Kernel, DType kType>
void DotAllRowsOf(const std::byte* bytes, const XRow* x, int64_t m, int64_t blocks, float* scales,
                  float* out) {
  Kernel::template DecodeRowScales<kType>(bytes, blocks, scales, scales + 2 * blocks);
  const WRow w_row{bytes, scales, scales + 2 * blocks};
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) Kernel::template Run<kType, 4>(w_row, x + r, blocks, out + r);
  for (; r < m; ++r) Kernel::template Run<kType, 1>(w_row, x + r, blocks, out + r);
}

template <typename Kernel>
void DotAllRows(DType type, const std::byte* w_row, const XRow* x, int64_t m, int64_t blocks,
                float* scales, float* out) {
  if (type == DType::kQ4_K) {
    DotAllRowsOf<Kernel, DType::kQ4_K>(w_row, x, m, blocks, scales, out);
  } else {
    DotAllRowsOf<Kernel, DType::kQ6_K>(w_row, x, m, blocks, scales, out);
  }
}

}  // namespace

void KQuantGemm(ThreadPool& pool, const float* x, int64_t m, const MatrixView& w, const float* bias,
                float* y, CpuLevel level) {
  assert(w.type == DType::kQ4_K || w.type == DType::kQ6_K);
  assert(m >= 0 && w.rows >= 0 && w.cols % kGgmlSuperBlockValues == 0);
  assert(CpuLevelSupported(level));
  if (m == 0 || w.rows == 0) return;
  level = ResolveCpuLevel(level);
  const int64_t blocks = w.cols / kGgmlBlockValues;
  const int64_t row_bytes = BlockRowBytes(w.type, w.cols);
  QuantizedRows xq;
  xq.qs.resize(static_cast<size_t>(m * w.cols));
  xq.d8.resize(static_cast<size_t>(m * blocks * kBlockLanes));
  xq.sum.resize(static_cast<size_t>(m * blocks));
  std::vector<XRow> x_rows(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    x_rows[r] = {xq.qs.data() + r * w.cols, xq.d8.data() + r * blocks * kBlockLanes,
                 xq.sum.data() + r * blocks};
  }
  pool.ParallelFor(m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      QuantizeRow(x + r * w.cols, blocks, xq.qs.data() + r * w.cols,
                  xq.d8.data() + r * blocks * kBlockLanes, xq.sum.data() + r * blocks);
    }
  });
  const auto* rows = static_cast<const std::byte*>(w.data);
  // A thread takes whole weight rows, each read once for every row of x.
  pool.ParallelFor(w.rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> dots(static_cast<size_t>(m));
    std::vector<float> scales(static_cast<size_t>(3 * blocks));
    for (int64_t n = begin; n < end; ++n) {
      const std::byte* w_row = rows + n * row_bytes;
      switch (level) {
#if defined(__x86_64__)
        case CpuLevel::kAvx512:
          DotAllRows<Avx512VnniKernel>(w.type, w_row, x_rows.data(), m, blocks, scales.data(),
                                       dots.data());
          break;
        case CpuLevel::kAvx2:
          DotAllRows<Avx2Kernel>(w.type, w_row, x_rows.data(), m, blocks, scales.data(),
                                 dots.data());
          break;
#endif
        default:
          for (int64_t r = 0; r < m; ++r) dots[r] = DotScalar(w.type, w_row, x_rows[r], blocks);
          break;
      }
      for (int64_t r = 0; r < m; ++r) {
        y[r * w.rows + n] = bias != nullptr ? dots[r] + bias[n] : dots[r];
      }
    }
  });
}

}  // namespace pulse::cpu
