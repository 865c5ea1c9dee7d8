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

// Without branches, so that loops over values vectorize (the same codes as a branch a case, for
// every one of the 2^32 inputs).
inline uint8_t F32ToFp8E4m3(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  // Normal codes: rebias the exponent (127 -> 7) and round the mantissa's 23 bits to 3, to
  // nearest even; a carry moves into the exponent, as it should.
  uint32_t normal = magnitude - (120u << 23);
  normal = (normal + 0x7FFFFu + ((normal >> 20) & 1u)) >> 20;
  // Below 2^-6 the codes are multiples of 2^-9: adding 2^23 to the quotient rounds it to an
  // integer, to nearest even (the default rounding mode), in the float's low mantissa bits.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) * 0x1p9f + 0x1p23f) - 0x4B000000u;
  constexpr uint32_t kSmallestNormal = 0x3C800000u;  // 2^-6
  constexpr uint32_t kLargest = 0x43E00000u;         // 448: larger ones, infinity too, saturate
  constexpr uint32_t kInfinity = 0x7F800000u;        // past it, NaN
  // Each case as a mask, all ones where it holds.
  const uint32_t small = 0u - static_cast<uint32_t>(magnitude < kSmallestNormal);
  const uint32_t large = 0u - static_cast<uint32_t>(magnitude >= kLargest);
  const uint32_t nan = 0u - static_cast<uint32_t>(magnitude > kInfinity);
  uint32_t code = (subnormal & small) | (normal & ~small);
  code = (0x7Eu & large) | (code & ~large);
  code = (0x7Fu & nan) | (code & ~nan);
  return static_cast<uint8_t>(sign | code);
}

}  // namespace pulse
