// Draws one request's tokens as its SamplingParams say, by the algorithm of
// core/backend/sampling.h. One Sampler per request: its generator advances only with that
// request's random draws, so its tokens do not depend on what else runs in the batch.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/backend/reference/sample_row.h"
#include "core/backend/sampling.h"
#include "core/base/status.h"
#include "core/sample/sampling_params.h"

namespace pulse {

class Sampler {
 public:
  // `params` must be valid (SamplingParams::Validate).
  explicit Sampler(const SamplingParams& params);

  // The parameters of the next draw, for a backend that samples (Backend::SampleTokens): the
  // generator advances once when the draw is random (temperature > 0), and the distinct ids of
  // `history` (the prompt followed by the generated ids) that the repetition penalty applies to
  // are appended to `penalised_ids`, which the result's history offset and count point into.
  TokenSampling Next(std::span<const int32_t> history, std::vector<int32_t>& penalised_ids);

  // Next, then the draw on the host from `logits` [vocab]. InvalidArgument when a logit is NaN or
  // +inf or none is finite.
  absl::StatusOr<int32_t> Sample(std::span<const float> logits, std::span<const int32_t> history);

 private:
  // A uniform double in [0, 1) from 53 bits of the generator.
  double Uniform();

  SamplingParams params_;
  std::mt19937_64 generator_;
  std::vector<int32_t> penalised_ids_;
  reference::SampleScratch scratch_;
};

// Why a row of logits cannot be sampled (the first NaN or +inf logit, or no finite one): DataLoss,
// since the model computed them (the ABI reports an invalid model).
absl::Status UnsampleableLogits(std::span<const float> logits);

}  // namespace pulse
