// The integer rows of a block summary (SummaryBytes, core/backend/block_estimator.h): int8 keeps
// values in [-kInt8Levels, kInt8Levels], int4 in [-kInt4Levels, kInt4Levels], two a byte. A row
// of values x keeps the scale s = m / levels, m the largest |x| of the row (0 for a row of zeros;
// NaN when some x is NaN or infinite), and for each x q = clamp(rint(x / s), -levels, levels) (0
// where s is 0 or NaN; the clamp acts only for a subnormal s); q reads back as q * s. So a row
// holding a NaN or an infinity reads as NaN throughout, and a box bound over it is NaN. The CPU
// reference and the CUDA kernels quantize and pack with these functions, so alike.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/backend/host_device.h"

namespace pulse {

inline constexpr int kInt8Levels = 127;
inline constexpr int kInt4Levels = 7;

// The scale of a row whose largest magnitude is `largest`, `finite` when every value is.
template <int kLevels>
PULSE_HOST_DEVICE inline float IntRowScale(float largest, bool finite) {
  return finite ? largest / static_cast<float>(kLevels) : NAN;
}

template <int kLevels>
PULSE_HOST_DEVICE inline int8_t QuantizeInt(float x, float scale) {
  if (!(scale > 0.0f)) return 0;
  return static_cast<int8_t>(
      fminf(fmaxf(rintf(x / scale), -static_cast<float>(kLevels)), static_cast<float>(kLevels)));
}

PULSE_HOST_DEVICE inline float DequantizeInt(int8_t q, float scale) {
  return static_cast<float>(q) * scale;
}

// Two int4 values (in [-8, 7]) as one byte, in two's complement: `low` in bits 0-3, `high` in
// bits 4-7. A row's channel 2j is the low value of its byte j, channel 2j + 1 the high one.
PULSE_HOST_DEVICE inline uint8_t PackInt4(int8_t low, int8_t high) {
  return static_cast<uint8_t>((low & 0x0F) | ((high & 0x0F) << 4));
}

PULSE_HOST_DEVICE inline int8_t LowInt4(uint8_t packed) {
  return static_cast<int8_t>(static_cast<int8_t>(packed << 4) >> 4);
}

PULSE_HOST_DEVICE inline int8_t HighInt4(uint8_t packed) {
  return static_cast<int8_t>(static_cast<int8_t>(packed) >> 4);
}

}  // namespace pulse
