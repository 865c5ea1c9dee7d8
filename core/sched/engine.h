// The engine: a queue of requests over one model, run by continuous batching with chunked
// prefill. Internally synchronized: Submit, Cancel and the accessors may be called from any
// thread; Step is called by one thread at a time (a second concurrent Step waits).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/model/model.h"
#include "core/sample/sampling_params.h"

namespace pulse {

using RequestId = uint64_t;

struct EngineOptions {
  int32_t max_batch = 16;            // sequences in one step
  int32_t prefill_chunk = 256;       // prompt tokens of one request in one step
  int32_t max_step_tokens = 512;     // tokens (prefill + decode) in one step
  int32_t block_tokens = 32;         // tokens of one KV block
  int64_t kv_capacity_tokens = 0;    // KV cache size in tokens; 0: 8 full contexts, capped
  int32_t max_context = 0;           // prompt + generated tokens; 0: the model's context

  absl::Status Validate() const;
};

enum class RequestState : uint8_t { kQueued, kRunning, kFinished };

enum class FinishReason : uint8_t {
  kNone,        // still running
  kMaxTokens,   // generated max_tokens
  kStopToken,   // sampled a stop token (it is part of the output)
  kContext,     // reached max_context
  kCancelled,   // Cancel() or a sink that returned false
  kCapacity,    // can never fit the KV cache
  kError,       // see RequestSnapshot::error
};

struct RequestStats {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double queue_ms = 0;  // submit to first scheduled step
  double ttft_ms = 0;   // submit to first generated token
  double tpot_ms = 0;   // mean time between generated tokens after the first
  double total_ms = 0;  // submit to finish (or to now)
};

struct TokenEvent {
  RequestId id = 0;
  int32_t token = 0;
  int32_t index = 0;  // 0 for the first generated token
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
};

// Called on the thread that runs Step(), with no engine lock held (it may call the engine).
// Returning false cancels the request.
using TokenSink = std::function<bool(const TokenEvent&)>;

struct RequestSnapshot {
  RequestState state = RequestState::kQueued;
  FinishReason reason = FinishReason::kNone;
  absl::Status error;
  std::vector<int32_t> tokens;  // every generated token so far
  RequestStats stats;
};

struct StepReport {
  int32_t scheduled = 0;      // sequences in this step
  int32_t prefill_tokens = 0;
  int32_t decode_tokens = 0;
  int32_t pending = 0;        // requests still queued or running after the step
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<const Model> model,
                                                        const EngineOptions& options);
  virtual ~Engine() = default;

  // Queues a request. InvalidArgument for bad parameters or tokens; ResourceExhausted when the
  // prompt plus max_tokens can never fit the KV cache. The sink may be empty.
  virtual absl::StatusOr<RequestId> Submit(std::vector<int32_t> prompt,
                                           const SamplingParams& params, TokenSink sink) = 0;
  // Marks the request cancelled; it leaves the batch before the next step. NotFound for an
  // unknown id; OK (no effect) for one already finished.
  virtual absl::Status Cancel(RequestId id) = 0;
  // Runs one step: admits queued requests whose KV fits, then one forward pass over the batch.
  virtual absl::StatusOr<StepReport> Step() = 0;
  virtual absl::StatusOr<RequestSnapshot> Snapshot(RequestId id) const = 0;
  // Forgets a finished request. FailedPrecondition while it is queued or running.
  virtual absl::Status Release(RequestId id) = 0;
  virtual int32_t pending() const = 0;

  virtual const Model& model() const = 0;
  virtual const EngineOptions& options() const = 0;
};

}  // namespace pulse
