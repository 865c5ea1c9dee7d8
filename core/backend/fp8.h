// fp8 E4M3 (the OCP "e4m3fn" format: 4 exponent bits of bias 7, 3 mantissa bits, no infinities,
// NaN at S.1111.111, largest finite 448) <-> fp32 on the host. Conversions to fp8 round to
// nearest even and saturate as CUDA's __NV_SATFINITE does: a value past 448 (infinity too)
// becomes +-448, NaN stays NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace pulse {

inline constexpr float kFp8E4m3Max = 448.0f;

inline float Fp8E4m3ToF32(uint8_t code) {
  const uint32_t sign = uint32_t{code & 0x80u} << 24;
  const uint32_t exponent = (code >> 3) & 0xFu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (exponent == 0) {  // subnormal: mantissa x 2^-9
    return std::bit_cast<float>(sign |
                                std::bit_cast<uint32_t>(static_cast<float>(mantissa) * 0x1p-9f));
  }
  return std::bit_cast<float>(sign | (exponent + 120) << 23 | mantissa << 20);
}

inline uint8_t F32ToFp8E4m3(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  if (std::isnan(value)) return sign | 0x7F;
  const float magnitude = std::fabs(value);
  if (magnitude >= kFp8E4m3Max) return sign | 0x7E;
  if (magnitude < 0x1p-6f) {
    // Subnormal codes are multiples of 2^-9, exact in fp32: round the quotient to nearest even.
    return sign | static_cast<uint8_t>(std::nearbyint(magnitude * 0x1p9f));
  }
  // Rebias the exponent (127 -> 7) and round the mantissa's 23 bits to 3, to nearest even; a
  // carry moves into the exponent, as it should. Below 448 the result is at most 448's code.
  uint32_t code = (bits & 0x7FFFFFFFu) - (120u << 23);
  code += 0x7FFFFu + ((code >> 20) & 1u);
  return sign | static_cast<uint8_t>(code >> 20);
}

}  // namespace pulse
