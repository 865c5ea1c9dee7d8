#include "core/sample/sampling_params.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace pulse {

absl::Status SamplingParams::Validate(int32_t vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrFormat("temperature must be finite and >= 0, got %g", temperature));
  }
  if (top_k < 0)
    return absl::InvalidArgumentError(absl::StrFormat("top_k must be >= 0, got %d", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat("top_p must be in (0, 1], got %g", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat("min_p must be in [0, 1], got %g", min_p));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrFormat("repetition_penalty must be finite and > 0, got %g", repetition_penalty));
  }
  if (max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_tokens must be >= 1, got %d", max_tokens));
  }
  for (const int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stop token id %d is outside the vocabulary [0, %d)", id, vocab_size));
    }
  }
  for (const std::string& stop : stop_strings) {
    if (stop.empty()) return absl::InvalidArgumentError("a stop string is empty");
  }
  return absl::OkStatus();
}

}  // namespace pulse
