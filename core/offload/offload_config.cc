#include "core/offload/offload_config.h"

#include <limits>

#include "absl/strings/str_format.h"
#include "core/backend/summary_radius.h"

namespace pulse {

absl::Status OffloadConfig::Validate() const {
  if (!SummaryRadiusValid(estimator.radius)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offload summary radius %g is outside [0, 1]", estimator.radius));
  }
  for (const auto& [name, tokens] :
       {std::pair{"host tokens", host_tokens}, std::pair{"slot tokens", slot_tokens}}) {
    if (tokens < 0 || tokens > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "offload %s %d is outside [0, %d]", name, tokens, std::numeric_limits<int32_t>::max()));
    }
  }
  if (host_chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offload host chunk of %d bytes", host_chunk_bytes));
  }
  if (selection.budget_tokens < 0 || selection.sink_tokens < 0 || selection.window_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "offload selection with a budget of %d tokens, %d sink and %d window tokens",
        selection.budget_tokens, selection.sink_tokens, selection.window_tokens));
  }
  if (host_codec != HostCodec::kRaw && host_codec != HostCodec::kFp8E4m3) {
    return absl::InvalidArgumentError("offload host codec: unknown");
  }
  if (dense_layers < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%d dense layers", dense_layers));
  }
  if (synthetic_picks && synthetic_picks->period_q < 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic picks drawn again every %d / 1024 steps: below one step",
                        synthetic_picks->period_q));
  }
  return absl::OkStatus();
}

}  // namespace pulse
