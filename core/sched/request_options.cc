#include "core/sched/request_options.h"

#include "absl/strings/str_format.h"

namespace pulse {

absl::Status CheckPrompt(std::span<const int32_t> prompt, int32_t max_context, int32_t vocab_size) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (prompt.size() >= static_cast<size_t>(max_context)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the prompt has %u tokens: it must be shorter than max_context (%d)",
                        prompt.size(), max_context));
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("prompt token %d at position %u is outside the vocabulary [0, %d)",
                          prompt[i], i, vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SelectionOptions>> RequestSelection(const RequestOffload& offload,
                                                                 const EngineOptions& engine,
                                                                 const ModelConfig& config) {
  using Mode = RequestOffload::Mode;
  if (offload.mode == Mode::kDense) return std::nullopt;
  if (TakesEngineOffload(offload)) {
    if (!engine.offload) return std::nullopt;
    return engine.offload->selection;
  }
  if (!engine.offload) {
    return absl::FailedPreconditionError(
        "the request asks for offloaded attention, but this engine was created without it "
        "(EngineOptions::offload)");
  }
  SelectionOptions selection = engine.offload->selection;
  const Mode engine_mode =
      selection.mode == SelectionMode::kSoloHead ? Mode::kSoloHead : Mode::kHeadWise;
  if (offload.mode != Mode::kEngine && offload.mode != engine_mode) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the request asks for %s selection, but this engine's device slots are laid out for %s",
        offload.mode == Mode::kSoloHead ? "solohead" : "headwise",
        engine_mode == Mode::kSoloHead ? "solohead" : "headwise"));
  }
  selection.budget_tokens = offload.budget_tokens.value_or(selection.budget_tokens);
  selection.sink_tokens = offload.sink_tokens.value_or(selection.sink_tokens);
  selection.window_tokens = offload.window_tokens.value_or(selection.window_tokens);
  PULSE_RETURN_IF_ERROR(BlockSelector::Create({.block_tokens = engine.block_tokens,
                                               .num_kv_heads = config.num_kv_heads,
                                               .head_dim = config.head_dim},
                                              config.num_heads, selection)
                            .status());
  return selection;
}

bool TakesEngineOffload(const RequestOffload& offload) {
  return offload.mode == RequestOffload::Mode::kEngine && !offload.budget_tokens.has_value() &&
         !offload.sink_tokens.has_value() && !offload.window_tokens.has_value();
}

}  // namespace pulse
