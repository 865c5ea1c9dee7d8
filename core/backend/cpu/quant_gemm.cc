#include "core/backend/cpu/quant_gemm.h"

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

// A row of x as q8 blocks.
struct XBlock {
  float d = 0.0f;
  float sum = 0.0f;  // d times the sum of qs (Q4_1's minimum multiplies it)
  std::array<int8_t, kGgmlBlockValues> qs{};
};

void QuantizeRow(const float* x, int64_t blocks, XBlock* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float* v = x + b * kGgmlBlockValues;
    float amax = 0.0f;
    for (int j = 0; j < kGgmlBlockValues; ++j) amax = std::max(amax, std::fabs(v[j]));
    XBlock& block = out[b];
    block.d = amax / 127.0f;
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kGgmlBlockValues; ++j) {
      const auto q = static_cast<int8_t>(std::nearbyint(v[j] * inverse));
      block.qs[static_cast<size_t>(j)] = q;
      sum += q;
    }
    block.sum = block.d * static_cast<float>(sum);
  }
}

// A weight block's integers (Q4_0 already less 8) and its scale and minimum.
struct WBlock {
  std::array<int8_t, kGgmlBlockValues> qs;
  float d;
  float m;
};

WBlock UnpackBlock(DType type, const std::byte* block) {
  WBlock w{};
  w.d = LoadHalf(block);
  switch (type) {
    case DType::kQ8_0:
      std::memcpy(w.qs.data(), block + 2, kGgmlBlockValues);
      break;
    case DType::kQ4_0:
    case DType::kQ4_1: {
      const int offset = type == DType::kQ4_0 ? 2 : 4;
      const int bias = type == DType::kQ4_0 ? 8 : 0;
      const auto* qs = reinterpret_cast<const uint8_t*>(block + offset);
      for (int j = 0; j < 16; ++j) {
        w.qs[static_cast<size_t>(j)] = static_cast<int8_t>((qs[j] & 0x0F) - bias);
        w.qs[static_cast<size_t>(j + 16)] = static_cast<int8_t>((qs[j] >> 4) - bias);
      }
      if (type == DType::kQ4_1) w.m = LoadHalf(block + 2);
      break;
    }
    default:
      break;
  }
  return w;
}

// The fixed lane tree: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
float ReduceBlockLanes(const float* lanes) {
  const float a0 = lanes[0] + lanes[4];
  const float a1 = lanes[1] + lanes[5];
  const float a2 = lanes[2] + lanes[6];
  const float a3 = lanes[3] + lanes[7];
  return (a0 + a2) + (a1 + a3);
}

float DotScalar(DType type, const std::byte* w_row, const XBlock* x, int64_t blocks) {
  const int64_t block_bytes = BlockTypeBytes(type);
  std::array<float, kBlockLanes> lanes{};
  float minimum = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const WBlock w = UnpackBlock(type, w_row + b * block_bytes);
    const float scale = w.d * x[b].d;
    for (int l = 0; l < kBlockLanes; ++l) {
      int32_t sum = 0;
      for (int j = 4 * l; j < 4 * l + 4; ++j) {
        sum += int32_t{w.qs[static_cast<size_t>(j)]} * x[b].qs[static_cast<size_t>(j)];
      }
      lanes[static_cast<size_t>(l)] =
          std::fma(static_cast<float>(sum), scale, lanes[static_cast<size_t>(l)]);
    }
    if (type == DType::kQ4_1) minimum = std::fma(w.m, x[b].sum, minimum);
  }
  return ReduceBlockLanes(lanes.data()) + minimum;
}

#if defined(__x86_64__)
#define PULSE_AVX2 __attribute__((target("avx2,f16c,fma")))

PULSE_AVX2 inline float HalfAvx2(const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
}

// The 32 nibbles of a Q4 block as bytes 0..15, in value order.
PULSE_AVX2 inline __m256i LoadNibbles(const std::byte* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Up to kRows rows of x against one weight row, the weight block unpacked once for all of them.
// maddubs multiplies unsigned by signed bytes: Q4_1's nibbles are unsigned already; Q8_0's and
// Q4_0's (less 8) signed values go in as |w| against x * sign(w) (|w| <= 128, |x| <= 127: the
// pair sums stay within int16).
template <DType kType, int kRows>
PULSE_AVX2 void DotRowsAvx2(const std::byte* w_row, const XBlock* const* x, int64_t blocks,
                            float* out) {
  constexpr int64_t kBytes = BlockTypeBytes(kType);
  __m256 lanes[kRows];
  float minimum[kRows];
  for (int r = 0; r < kRows; ++r) {
    lanes[r] = _mm256_setzero_ps();
    minimum[r] = 0.0f;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* block = w_row + b * kBytes;
    __m256i unsigned_w;
    __m256i sign_w = _mm256_setzero_si256();
    float d;
    float m = 0.0f;
    if constexpr (kType == DType::kQ4_1) {
      uint32_t halves;
      std::memcpy(&halves, block, sizeof(halves));
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(halves)));
      d = _mm_cvtss_f32(dm);
      m = _mm_cvtss_f32(_mm_movehdup_ps(dm));
      unsigned_w = LoadNibbles(block + 4);
    } else {
      d = HalfAvx2(block);
      const __m256i w = kType == DType::kQ8_0
                            ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2))
                            : _mm256_sub_epi8(LoadNibbles(block + 2), _mm256_set1_epi8(8));
      unsigned_w = _mm256_sign_epi8(w, w);
      sign_w = w;
    }
    for (int r = 0; r < kRows; ++r) {
      const XBlock& xb = x[r][b];
      __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs.data()));
      if constexpr (kType != DType::kQ4_1) xv = _mm256_sign_epi8(xv, sign_w);
      const __m256i pairs = _mm256_maddubs_epi16(unsigned_w, xv);
      const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
      lanes[r] = _mm256_fmadd_ps(sums, _mm256_set1_ps(d * xb.d), lanes[r]);
      if constexpr (kType == DType::kQ4_1) minimum[r] = std::fma(m, xb.sum, minimum[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    alignas(32) float values[kBlockLanes];
    _mm256_store_ps(values, lanes[r]);
    out[r] = ReduceBlockLanes(values) + minimum[r];
  }
}

template <DType kType>
PULSE_AVX2 void DotAllRowsAvx2(const std::byte* w_row, const XBlock* x, int64_t m, int64_t blocks,
                               float* out) {
  constexpr int kTile = 4;
  const XBlock* rows[kTile];
  int64_t r = 0;
  for (; r + kTile <= m; r += kTile) {
    for (int i = 0; i < kTile; ++i) rows[i] = x + (r + i) * blocks;
    DotRowsAvx2<kType, kTile>(w_row, rows, blocks, out + r);
  }
  for (; r < m; ++r) {
    rows[0] = x + r * blocks;
    DotRowsAvx2<kType, 1>(w_row, rows, blocks, out + r);
  }
}

PULSE_AVX2 void DotAllRowsAvx2For(DType type, const std::byte* w_row, const XBlock* x, int64_t m,
                                  int64_t blocks, float* out) {
  switch (type) {
    case DType::kQ8_0:
      return DotAllRowsAvx2<DType::kQ8_0>(w_row, x, m, blocks, out);
    case DType::kQ4_0:
      return DotAllRowsAvx2<DType::kQ4_0>(w_row, x, m, blocks, out);
    default:
      return DotAllRowsAvx2<DType::kQ4_1>(w_row, x, m, blocks, out);
  }
}
#endif

bool CpuHasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") != 0 &&
                          __builtin_cpu_supports("f16c") != 0 && __builtin_cpu_supports("fma") != 0;
  return has;
#else
  return false;
#endif
}

}  // namespace

bool QuantKernelLevelSupported(QuantKernelLevel level) {
  return level != QuantKernelLevel::kAvx2 || CpuHasAvx2();
}

void QuantizedGemm(ThreadPool& pool, const float* x, int64_t m, const MatrixView& w,
                   const float* bias, float* y, QuantKernelLevel level) {
  assert(m >= 0 && w.rows >= 0 && w.cols % kGgmlBlockValues == 0);
  assert(QuantKernelLevelSupported(level));
  if (m == 0 || w.rows == 0) return;
  if (level == QuantKernelLevel::kBest) {
    level = CpuHasAvx2() ? QuantKernelLevel::kAvx2 : QuantKernelLevel::kScalar;
  }
  const int64_t blocks = w.cols / kGgmlBlockValues;
  const int64_t row_bytes = blocks * BlockTypeBytes(w.type);
  std::vector<XBlock> xq(static_cast<size_t>(m * blocks));
  pool.ParallelFor(m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      QuantizeRow(x + r * w.cols, blocks, xq.data() + r * blocks);
    }
  });
  const auto* rows = static_cast<const std::byte*>(w.data);
  // A thread takes whole weight rows, each read once for every row of x.
  pool.ParallelFor(w.rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> dots(static_cast<size_t>(m));
    for (int64_t n = begin; n < end; ++n) {
      const std::byte* w_row = rows + n * row_bytes;
#if defined(__x86_64__)
      if (level == QuantKernelLevel::kAvx2) {
        DotAllRowsAvx2For(w.type, w_row, xq.data(), m, blocks, dots.data());
      } else {
        for (int64_t r = 0; r < m; ++r)
          dots[r] = DotScalar(w.type, w_row, xq.data() + r * blocks, blocks);
      }
#else
      for (int64_t r = 0; r < m; ++r) dots[r] = DotScalar(w.type, w_row, xq.data() + r * blocks, blocks);
#endif
      for (int64_t r = 0; r < m; ++r)
        y[r * w.rows + n] = bias != nullptr ? dots[r] + bias[n] : dots[r];
    }
  });
}

int64_t BlockRowBytes(DType type, int64_t cols) {
  return cols / kGgmlBlockValues * BlockTypeBytes(type);
}

void DecodeBlockRow(DType type, const void* row, int64_t cols, float* out) {
  const auto* blocks = static_cast<const std::byte*>(row);
  const int64_t block_bytes = BlockTypeBytes(type);
  for (int64_t b = 0; b < cols / kGgmlBlockValues; ++b) {
    const std::byte* block = blocks + b * block_bytes;
    float* values = out + b * kGgmlBlockValues;
    switch (type) {
      case DType::kQ8_0:
        DecodeQ8_0(block, values);
        break;
      case DType::kQ4_0:
        DecodeQ4_0(block, values);
        break;
      default:
        DecodeQ4_1(block, values);
        break;
    }
  }
}

}  // namespace pulse::cpu
