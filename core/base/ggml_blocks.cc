#include "core/base/ggml_blocks.h"

#include <cstring>

namespace pulse {

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  uint32_t out;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&out, &magnitude, sizeof(out));
    out |= sign;
  } else if (exponent == 0x1F) {
    out = sign | 0x7F800000u | (mantissa << 13);
  } else {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

float Bf16ToFloat(uint16_t bits) {
  const uint32_t out = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

float LoadHalf(const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return HalfToFloat(bits);
}

void DecodeQ8_0(const std::byte* block, float* out) {
  const float d = LoadHalf(block);
  const auto* qs = reinterpret_cast<const int8_t*>(block + 2);
  for (int j = 0; j < 32; ++j) out[j] = qs[j] * d;
}

void DecodeQ4_0(const std::byte* block, float* out) {
  const float d = LoadHalf(block);
  const auto* qs = reinterpret_cast<const uint8_t*>(block + 2);
  for (int j = 0; j < 16; ++j) {
    out[j] = ((qs[j] & 0x0F) - 8) * d;
    out[j + 16] = ((qs[j] >> 4) - 8) * d;
  }
}

void DecodeQ4_1(const std::byte* block, float* out) {
  const float d = LoadHalf(block);
  const float m = LoadHalf(block + 2);
  const auto* qs = reinterpret_cast<const uint8_t*>(block + 4);
  for (int j = 0; j < 16; ++j) {
    out[j] = (qs[j] & 0x0F) * d + m;
    out[j + 16] = (qs[j] >> 4) * d + m;
  }
}

void DecodeQ4_K(const std::byte* block, float* out) {
  const float d = LoadHalf(block);
  const float dmin = LoadHalf(block + 2);
  const auto* scales = reinterpret_cast<const uint8_t*>(block + 4);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc;
    uint8_t m;
    Q4_KScaleMin(j, scales, &sc, &m);
    const float scale = d * sc;
    const float minimum = dmin * m;
    for (int v = 32 * j; v < 32 * j + 32; ++v) out[v] = scale * Q4_KQuant(block, v) - minimum;
  }
}

void DecodeQ6_K(const std::byte* block, float* out) {
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = LoadHalf(block + 208);
  for (int v = 0; v < 256; ++v) out[v] = d * scales[v / 16] * Q6_KQuant(block, v);
}

}  // namespace pulse
