// ggml's 32-value blocks and 256-value K-quant super-blocks that both the GGUF reader and the CPU
// backend decode (the reader to load a tensor as fp32, the backend to compute on weights kept in
// their blocks), and IEEE half to float. The decoders are bit-exact with ggml's reference
// dequantize_row_* functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pulse {

inline constexpr int64_t kGgmlBlockValues = 32;
// block_q8_0 { ggml_half d; int8_t qs[32]; }: value j is qs[j] * d.
inline constexpr int64_t kQ8_0BlockBytes = 34;
// block_q4_0 { ggml_half d; uint8_t qs[16]; }: low nibbles are values 0..15, high ones 16..31,
// each (q - 8) * d.
inline constexpr int64_t kQ4_0BlockBytes = 18;
// block_q4_1 { ggml_half d; ggml_half m; uint8_t qs[16]; }: each value q * d + m.
inline constexpr int64_t kQ4_1BlockBytes = 20;

// The K-quants' super-blocks of 256 values.
inline constexpr int64_t kGgmlSuperBlockValues = 256;
// block_q4_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qs[128]; }: eight
// sub-blocks of 32 values, each with a 6-bit scale sc and minimum m packed in `scales`; each 32
// bytes of qs hold sub-block 2i in their low nibbles and 2i + 1 in their high ones; a value is
// d * sc * q - dmin * m.
inline constexpr int64_t kQ4_KBlockBytes = 144;
// block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }: sixteen
// sub-blocks of 16 values, each with an int8 scale; a value is d * scale * (q - 32), q's six bits
// spread over ql's nibbles and qh's bit pairs in ggml's interleaved order (Q6_KQuant).
inline constexpr int64_t kQ6_KBlockBytes = 210;

void DecodeQ8_0(const std::byte* block, float* out);
void DecodeQ4_0(const std::byte* block, float* out);
void DecodeQ4_1(const std::byte* block, float* out);
void DecodeQ4_K(const std::byte* block, float* out);
void DecodeQ6_K(const std::byte* block, float* out);

// Sub-block j's (0..7) 6-bit scale and minimum of a block_q4_K's 12 packed scale bytes (ggml's
// get_scale_min_k4).
inline void Q4_KScaleMin(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Value v's (0..255) unsigned 4-bit q of a block_q4_K.
inline int Q4_KQuant(const std::byte* block, int v) {
  const auto chunk = static_cast<uint8_t>(block[16 + 32 * (v / 64) + v % 32]);
  return (chunk >> (4 * ((v / 32) % 2))) & 0x0F;
}

// Value v's (0..255) q - 32 of a block_q6_K: v = 128 n + 32 k + l takes its low four bits from
// ql[64 n + 32 (k % 2) + l] (the high nibble when k >= 2), its high two from bits 2k and 2k + 1
// of qh[32 n + l]. Its scale is scales[v / 16].
inline int Q6_KQuant(const std::byte* block, int v) {
  const int n = v / 128;
  const int k = (v / 32) % 4;
  const int l = v % 32;
  const int low = (static_cast<uint8_t>(block[64 * n + 32 * (k % 2) + l]) >> (4 * (k / 2))) & 0x0F;
  const int high = (static_cast<uint8_t>(block[128 + 32 * n + l]) >> (2 * k)) & 3;
  return (low | (high << 4)) - 32;
}

// IEEE half and bfloat16 to float, exact (every value, subnormals, inf and NaN payloads).
float HalfToFloat(uint16_t bits);
float Bf16ToFloat(uint16_t bits);
// The half at `p` (any alignment).
float LoadHalf(const std::byte* p);

}  // namespace pulse
