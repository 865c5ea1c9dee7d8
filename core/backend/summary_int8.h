// The int8 rows of a block summary (SummaryBytes, core/backend/block_estimator.h). A row of values
// x keeps the scale s = m / 127, m the largest |x| of the row (0 for a row of zeros; NaN when some
// x is NaN or infinite), and for each x q = clamp(rint(x / s), -127, 127) (0 where s is 0 or NaN;
// the clamp acts only for a subnormal s); q reads back as q * s. So a row holding a NaN or an
// infinity reads as NaN throughout, and a box bound over it is NaN. The CPU reference and the
// CUDA kernels quantize with these functions, so alike.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/backend/host_device.h"

namespace pulse {

// The scale of a row whose largest magnitude is `largest`, `finite` when every value is.
PULSE_HOST_DEVICE inline float Int8RowScale(float largest, bool finite) {
  return finite ? largest / 127.0f : NAN;
}

PULSE_HOST_DEVICE inline int8_t QuantizeInt8(float x, float scale) {
  if (!(scale > 0.0f)) return 0;
  return static_cast<int8_t>(fminf(fmaxf(rintf(x / scale), -127.0f), 127.0f));
}

PULSE_HOST_DEVICE inline float DequantizeInt8(int8_t q, float scale) {
  return static_cast<float>(q) * scale;
}

}  // namespace pulse
