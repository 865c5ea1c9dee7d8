// Applying a finished forward pass to the requests of its batch: their KV counts as computed, the
// sampled rows' tokens are drawn (or taken from the backend's draws), appended and streamed into
// text, and their events made (engine.h, TokenSink). What becomes of the requests that end (their
// finish, their blocks) is left to the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/format/config.h"
#include "core/sched/engine.h"
#include "core/sched/request.h"
#include "core/sched/scheduler.h"

namespace pulse {

// A token event to deliver once the engine lock is released.
struct Delivery {
  std::shared_ptr<const TokenSink> sink;
  TokenEvent event;  // its text is set from `text` at delivery
  std::string text;
};

// A forward pass's outcome for the sampled rows of its batch.
struct ForwardResult {
  absl::Status status = absl::OkStatus();
  // With EngineOptions::logits_to_host, the rows' logits [rows][vocab], sampled here; otherwise
  // the backend's draw of each row (-1 where none could be drawn).
  bool logits_to_host = false;
  std::span<const float> logits = {};
  std::span<const int32_t> tokens = {};
};

// A request of the step that ends now.
struct RequestEnd {
  Request* request = nullptr;  // one of the step's work
  // Why it finishes (kError: its error is set), or none when it finished while the step was in
  // flight (it was cancelled) and only its blocks go back now.
  std::optional<FinishReason> reason;
};

struct StepCompletion {
  std::vector<RequestEnd> ends;  // in the order of the step's work
  int32_t prefill_tokens = 0;    // computed (none when the forward pass failed)
  int32_t decode_tokens = 0;
  int32_t generated_tokens = 0;  // sampled
};

// Applies `forward` to the step's `work` (taking its requests out of the step), appending their
// events to `deliveries`; a request the forward pass or its draw failed gets `error` set and an
// error event.
StepCompletion CompleteStep(std::span<const ScheduledSequence> work, const ForwardResult& forward,
                            const ModelConfig& config, Clock::time_point now,
                            std::vector<Delivery>& deliveries);

// Sets the request's error and appends its error event (when it has a sink) to `deliveries`; the
// caller finishes it with kError.
void RecordFailure(Request& request, absl::Status error, std::vector<Delivery>& deliveries);

}  // namespace pulse
