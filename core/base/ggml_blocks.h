// ggml's 32-value blocks that both the GGUF reader and the CPU backend decode (the reader to load
// a tensor as fp32, the backend to compute on weights kept in their blocks), and IEEE half to
// float. The decoders are bit-exact with ggml's reference dequantize_row_* functions.
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

void DecodeQ8_0(const std::byte* block, float* out);
void DecodeQ4_0(const std::byte* block, float* out);
void DecodeQ4_1(const std::byte* block, float* out);

// IEEE half and bfloat16 to float, exact (every value, subnormals, inf and NaN payloads).
float HalfToFloat(uint16_t bits);
float Bf16ToFloat(uint16_t bits);
// The half at `p` (any alignment).
float LoadHalf(const std::byte* p);

}  // namespace pulse
