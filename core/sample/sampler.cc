#include "core/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace pulse {

Sampler::Sampler(const SamplingParams& params) : params_(params), generator_(params.seed) {}

TokenSampling Sampler::Next(std::span<const int32_t> history, std::vector<int32_t>& penalised_ids) {
  TokenSampling next;
  next.temperature = params_.temperature;
  next.top_p = params_.top_p;
  next.min_p = params_.min_p;
  next.top_k = params_.top_k;
  next.repetition_penalty = params_.repetition_penalty;
  next.history_offset = static_cast<int32_t>(penalised_ids.size());
  if (params_.repetition_penalty != 1.0f) {
    const auto begin = penalised_ids.insert(penalised_ids.end(), history.begin(), history.end());
    std::sort(begin, penalised_ids.end());
    penalised_ids.erase(std::unique(begin, penalised_ids.end()), penalised_ids.end());
  }
  next.history_count = static_cast<int32_t>(penalised_ids.size()) - next.history_offset;
  if (params_.temperature > 0.0f) next.uniform = Uniform();
  return next;
}

absl::StatusOr<int32_t> Sampler::Sample(std::span<const float> logits,
                                        std::span<const int32_t> history) {
  penalised_ids_.clear();
  const TokenSampling next = Next(history, penalised_ids_);
  const int32_t token = reference::SampleRow(logits, next, penalised_ids_, scratch_);
  if (token < 0) return UnsampleableLogits(logits);
  return token;
}

double Sampler::Uniform() { return static_cast<double>(generator_() >> 11) * 0x1.0p-53; }

absl::Status UnsampleableLogits(std::span<const float> logits) {
  // The model computed numbers that are no distribution: its weights or this input overflow.
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) {
      return absl::DataLossError(
          absl::StrFormat("the model computed logit %d = %g: cannot sample", i, logits[i]));
    }
  }
  return absl::DataLossError("the model computed no finite logit: cannot sample");
}

}  // namespace pulse
