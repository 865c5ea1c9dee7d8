// Drawing tokens from logits: the one algorithm both backends implement (the CPU backend in
// plain C++, the CUDA backend on the GPU), deterministic and without a full sort.
//
// For one row of logits l[0, vocab) and its TokenSampling:
//  1. Repetition penalty: each id of the row's history (distinct ids) gets
//     l > 0 ? l / penalty : l * penalty.
//  2. A row with a NaN or +inf logit, or with every logit -inf, cannot be sampled (token -1).
//  3. temperature == 0 is greedy: the argmax, the lowest id on ties.
//  4. Otherwise every token has a key, OrderedBits(l) in the high 32 bits and ~id in the low 32,
//     so larger keys are better tokens and ties go to the lower id; and a weight, exp((l - max) /
//     temperature) in 32-bit fixed point (SampleWeight; the best token weighs 2^32 - 1, a weight
//     under 2^-33 is 0). "Mass(>= K)" is the summed weight of the candidates with keys >= K.
//  5. top_k > 0 keeps the top_k largest keys.
//  6. top_p < 1 keeps the keys >= K_p, K_p the largest key with Mass(>= K_p) >= ceil(top_p *
//     Mass(all candidates)): the smallest best-first prefix with at least that mass.
//  7. min_p > 0 keeps the candidates with weight >= ceil(min_p * 2^32).
//  8. The draw: target = floor(uniform * Mass(all kept)); the token is the one with the largest key
//     K such that Mass(>= K) >= target + 1, i.e. the first kept token, best first, whose
//     cumulative weight exceeds the target.
// Every step is exact integer or IEEE arithmetic, so the CPU and the GPU draw the same token
// (weights come from exp in double precision, whose last-bit differences between libraries can
// move a fixed-point weight by one unit: a different token then needs a target within a unit of
// a boundary, about 2^-49 of the draws).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/backend/host_device.h"

namespace pulse {

struct TokenSampling {
  float temperature = 0.0f;  // >= 0; 0 is greedy
  float top_p = 1.0f;        // in (0, 1]; 1 is off
  float min_p = 0.0f;        // in [0, 1]; 0 is off
  float repetition_penalty = 1.0f;
  int32_t top_k = 0;  // >= 0; 0 is off
  // This row's distinct penalised ids: history[history_offset, history_offset + history_count).
  int32_t history_offset = 0;
  int32_t history_count = 0;
  double uniform = 0.0;  // in [0, 1): where the draw falls
};

inline constexpr int kSampleWeightBits = 32;
inline constexpr uint64_t kSampleWeightMax = (uint64_t{1} << kSampleWeightBits) - 1;

// The float's bits as an unsigned integer in the float's order (-inf lowest, +inf highest).
PULSE_HOST_DEVICE inline uint32_t OrderedBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

PULSE_HOST_DEVICE inline uint64_t SampleKey(float logit, int32_t id) {
  return (uint64_t{OrderedBits(logit)} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

PULSE_HOST_DEVICE inline int32_t SampleKeyId(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key & 0xFFFFFFFFu));
}

// The fixed-point weight of `logit` given the row's best logit `max` (finite).
PULSE_HOST_DEVICE inline uint64_t SampleWeight(float logit, float max, float temperature) {
  if (logit == -__builtin_huge_valf()) return 0;
  const double scaled = exp((static_cast<double>(logit) - static_cast<double>(max)) /
                            static_cast<double>(temperature)) *
                        static_cast<double>(uint64_t{1} << kSampleWeightBits);
  const uint64_t weight = static_cast<uint64_t>(scaled + 0.5);
  return weight > kSampleWeightMax ? kSampleWeightMax : weight;
}

PULSE_HOST_DEVICE inline float PenalisedLogit(float logit, float penalty) {
  return logit > 0.0f ? logit / penalty : logit * penalty;
}

}  // namespace pulse
