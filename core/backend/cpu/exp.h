// e^x written without branches or calls, so that loops over it vectorize (std::exp does not).
// Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-7 polynomial, times 2^n.
// Within 2 ulp of e^x for normal results; x below ~-87.3 (subnormal results) gives 0, x above
// ~88.4 gives +inf, NaN gives NaN.
#pragma once

#include <bit>
#include <cstdint>

#include "core/backend/cpu/kernel_target.h"
#include "core/backend/cpu/lanes.h"

PULSE_CPU_KERNELS_BEGIN

inline float Exp(float x) {
  constexpr float kMaxX = 88.3762626647949f;   // largest x with e^x < 2^127 * 2
  constexpr float kMinX = -87.3365447504019f;  // smallest x with a normal e^x
  constexpr float kRoundMagic = 12582912.0f;   // 1.5 * 2^23: adding it rounds to an integer
  // NaN takes the lower bound here (the comparisons are false), so that no NaN reaches the
  // float-to-int conversions below (undefined behaviour); it is returned as it came at the end.
  const float clamped = x > kMaxX ? kMaxX : (x >= kMinX ? x : kMinX);
  const float n = MulAdd(clamped, 1.44269504088896341f, kRoundMagic) - kRoundMagic;
  float r = MulAdd(n, -0.693359375f, clamped);  // ln2 in two parts: exact first product
  r = MulAdd(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = MulAdd(p, r, 1.3981999507e-3f);
  p = MulAdd(p, r, 8.3334519073e-3f);
  p = MulAdd(p, r, 4.1665795894e-2f);
  p = MulAdd(p, r, 1.6666665459e-1f);
  p = MulAdd(p, r, 5.0000001201e-1f);
  const float e_r = MulAdd(p, r * r, r) + 1.0f;
  // 2^n in two factors, so that n = 128 (x near kMaxX) stays representable.
  const int32_t half_n = static_cast<int32_t>(n) >> 1;
  const float scale_a = std::bit_cast<float>((half_n + 127) << 23);
  const float scale_b = std::bit_cast<float>((static_cast<int32_t>(n) - half_n + 127) << 23);
  const float result = e_r * scale_a * scale_b;
  const float saturated = x > kMaxX ? std::bit_cast<float>(0x7F800000u) : 0.0f;
  return x != x ? x : (x > kMaxX || x < kMinX ? saturated : result);
}

PULSE_CPU_KERNELS_END
