// What Submit checks of a request's prompt, and the selection its offload options resolve to on
// the engine (engine.h, RequestOffload).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/base/status.h"
#include "core/format/config.h"
#include "core/offload/selection.h"
#include "core/sched/engine.h"

namespace pulse {

// InvalidArgument for an empty prompt, one of max_context tokens or more, or a token outside the
// vocabulary [0, vocab_size).
absl::Status CheckPrompt(std::span<const int32_t> prompt, int32_t max_context, int32_t vocab_size);

// The selection a request with `offload` decodes with on an engine created with `engine` (every 0
// resolved) over a model of `config` (none: dense). FailedPrecondition for a selection on an
// engine that does not offload; InvalidArgument for another mode than the engine's or sizes the
// selector refuses.
absl::StatusOr<std::optional<SelectionOptions>> RequestSelection(const RequestOffload& offload,
                                                                 const EngineOptions& engine,
                                                                 const ModelConfig& config);

// Whether `offload` takes the engine's offloading as it is (no mode, budget, sink or window of
// its own): the requests the engine places (EngineOptions::admission).
bool TakesEngineOffload(const RequestOffload& offload);

}  // namespace pulse
