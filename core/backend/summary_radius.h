// The summary radius: a block summary keeps each key channel's [min, max] shrunk around its
// midpoint to this fraction of its half-width (1: the whole range, Quest's bound; 0: the
// midpoint). The CPU reference and the CUDA kernel shrink with these functions, so alike.
#pragma once

#include <cmath>

#include "core/backend/host_device.h"

namespace pulse {

PULSE_HOST_DEVICE inline bool SummaryRadiusValid(float radius) {
  return radius >= 0.0f && radius <= 1.0f;  // false for NaN
}

// [lo, hi] -> [m - radius * h, m + radius * h] with m = lo/2 + hi/2 and h = hi/2 - lo/2. The
// halvings are exact, so a compiler that contracts them into fused multiply-adds rounds the same.
PULSE_HOST_DEVICE inline void ShrinkToRadius(float& lo, float& hi, float radius) {
  const float mid = 0.5f * lo + 0.5f * hi;
  const float half = 0.5f * hi - 0.5f * lo;
  lo = fmaf(-radius, half, mid);
  hi = fmaf(radius, half, mid);
}

}  // namespace pulse
