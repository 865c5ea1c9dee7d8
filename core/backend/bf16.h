// bf16 <-> fp32 on the host, bit-exact with the hardware's round-to-nearest-even conversion.
#pragma once

#include <bit>
#include <cstdint>

namespace pulse {

inline float Bf16ToF32(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

// Rounds to nearest even; NaN stays NaN (quiet).
inline uint16_t F32ToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (value != value) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

}  // namespace pulse
