// Draws one request's tokens from logits as its SamplingParams say. One Sampler per request: its
// generator advances only with that request's draws, so its tokens do not depend on what else
// runs in the batch.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/sample/sampling_params.h"

namespace pulse {

class Sampler {
 public:
  // `params` must be valid (SamplingParams::Validate).
  explicit Sampler(const SamplingParams& params);

  // The next token for `logits` [vocab]; `history` is the prompt followed by the generated ids
  // (what the repetition penalty sees). InvalidArgument when a logit is NaN or +inf or none is
  // finite.
  absl::StatusOr<int32_t> Sample(std::span<const float> logits, std::span<const int32_t> history);

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };

  // Penalised copy of `logits` in penalised_ (or `logits` itself without a penalty).
  std::span<const float> Penalise(std::span<const float> logits, std::span<const int32_t> history);
  // Fills candidates_ with the tokens that survive top-k, top-p and min-p, and weights_.
  void Filter(std::span<const float> logits);
  // Keeps the smallest set of best candidates whose tempered mass is >= top_p of theirs.
  void KeepTopP();
  // A strict total order, best first: higher logit, then lower id.
  static bool Better(const Candidate& a, const Candidate& b);
  // The tempered probability of `c` relative to the best candidate's (which is exactly 1).
  double Weight(const Candidate& c) const;
  // A uniform double in [0, 1) from 53 bits of the generator.
  double Uniform();

  SamplingParams params_;
  std::mt19937_64 generator_;
  std::vector<float> penalised_;
  std::vector<int32_t> penalised_ids_;
  std::vector<Candidate> candidates_;
  std::vector<double> weights_;  // Weight() of each candidate
  float max_logit_ = 0.0f;
};

}  // namespace pulse
