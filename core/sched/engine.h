// The engine: a queue of requests over one model, run by continuous batching with chunked
// prefill. Internally synchronized: Submit, Cancel, Release and the accessors may be called from
// any thread (also while a step runs; Cancel and Release then wait for a sink call of their
// request in progress, see TokenSink); Step is called by one thread at a time (a second
// concurrent Step waits).
//
// Admission: a request is admitted (queued -> running) only when the KV blocks for its whole
// worst case, min(prompt + max_tokens, max_context) - 1 tokens (the last token's KV is never
// computed), can be reserved; so a running request never runs out of KV and never takes another
// request's memory. Queued requests are admitted first in, first out: while the head of the queue
// does not fit, the requests behind it wait too. A request that could not fit even in an empty
// cache is rejected at Submit. An offloading engine also places each request that takes its
// offloading (EngineOptions::admission): resident or offloaded, and whether now.
//
// Each step, every decoding request contributes one token, and prefilling requests contribute
// chunks of up to prefill_chunk prompt tokens, first admitted first, within max_step_tokens; a
// long prompt spans several steps while the others keep decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/model/model.h"
#include "core/offload/offload_config.h"
#include "core/offload/selection.h"
#include "core/offload/sparse_attention.h"
#include "core/sample/sampling_params.h"
#include "core/tokenizer/tokenizer.h"

namespace pulse {

using RequestId = uint64_t;

// How an offloading engine places the requests that take its offloading (those that ask for a
// mode or a budget of their own run as they ask).
enum class AdmissionKind : uint8_t {
  // Resident (attended densely, its whole worst case reserved in the KV cache) while it fits
  // there with room left for the resident set of an offloaded request like it (when the batch
  // has room for another); otherwise offloaded, while the predicted recall time of a decode step
  // with it stays within the step's measured compute time (core/sched/admission.h), and
  // otherwise it waits. So at a load that fits the KV cache nothing is offloaded. Running
  // requests move too (Scheduler::Admit): a resident one is demoted when a waiting request's
  // prompt does not fit, an offloaded one promoted back when memory frees; each at most once.
  kIoAdaptive,
  // Offloaded, whenever its blocks in both tiers and its slots can be reserved.
  kOffloadEvery,
};

// The library's KV block size: an engine with offload selects blocks of kOffloadBlockTokens,
// small enough to find what attention needs at one sixteenth of the context
// (docs/design/selection.md); one without pages at kDenseBlockTokens, whose longer runs of keys
// its attention reads faster.
inline constexpr int32_t kOffloadBlockTokens = 4;
inline constexpr int32_t kDenseBlockTokens = 8;

// `block_tokens`, or where it is 0 the library's choice for an engine with or without offload.
constexpr int32_t ResolveBlockTokens(int32_t block_tokens, bool offload) {
  if (block_tokens != 0) return block_tokens;
  return offload ? kOffloadBlockTokens : kDenseBlockTokens;
}

struct EngineOptions {
  int32_t max_batch = 16;         // sequences in one step, 1 to 4096
  int32_t prefill_chunk = 256;    // prompt tokens of one request in one step, >= 1
  int32_t max_step_tokens = 512;  // tokens (prefill + decode) in one step, max_batch to 65536
  // Tokens of one KV block, 1 to 4096; 0: the library's choice (ResolveBlockTokens).
  int32_t block_tokens = 0;
  // KV cache size in tokens; 0: what kv_memory_bytes leaves, or without it 8 full contexts,
  // capped at 70% of the backend's free memory (or at 1 GiB on a backend without a memory limit
  // of its own).
  int64_t kv_capacity_tokens = 0;
  // The device memory the KV may use in all, with kv_capacity_tokens 0: with offload, the
  // slots, the summaries of the host tier's blocks and the staging area come first, and the KV
  // cache gets the rest. 0: no such cap.
  int64_t kv_memory_bytes = 0;
  int32_t max_context = 0;  // prompt + generated tokens, at most the model's; 0: the model's
  // Copy each step's logits to the host, sample there and hand them to the sinks
  // (TokenEvent::logits). Otherwise (the default) the backend samples and only the tokens come
  // back; the tokens are the same either way (core/backend/sampling.h).
  bool logits_to_host = false;
  // Offloaded sparse decode attention for every request (core/offload/offload_config.h): each
  // decode step attends, in every layer, only to the blocks offload->selection selects; prompt
  // chunks stay dense. Each full block of a request is written back to the host tier once; while
  // a request decodes only its sinks and window stay in the KV cache (whose size is then
  // kv_capacity_tokens for those and the prompts being prefilled; a prompt it cannot hold is
  // prefilled staged, reading its earlier chunks' KV from the host tier a layer at a time:
  // docs/design/admission.md), and the blocks a step selects
  // are recalled into the device tier's slots, where they stay cached across steps. Its 0 sizes
  // resolve to defaults: host_tokens 8 full contexts capped at 4 GiB of KV; slot_tokens max_batch
  // budgets (or contexts, when shorter) capped at 1 GiB of KV. Empty (the default): dense
  // attention, every block in the KV cache.
  std::optional<OffloadConfig> offload = std::nullopt;
  AdmissionKind admission = AdmissionKind::kIoAdaptive;  // with offload
  // Under kIoAdaptive, the least budget (offload->selection.budget_tokens or less) admission may
  // give a request the engine places, when a step with it at the engine's budget would recall
  // past its compute time: the budget halves until the predicted recall keeps up, down to this
  // one, and the request is admitted with it rather than waiting. Fewer tokens attended, more
  // requests running; its tokens then depend on the measured rates. 0 (the default): budgets
  // are never lowered.
  int32_t min_budget_tokens = 0;
  // Replay decode steps as graphs where the backend has them (ModelRunnerOptions::decode_graphs).
  bool decode_graphs = true;
  // The micro-batches a decode step runs as, interleaved layer by layer so that one's recall
  // lands while another computes (core/sched/micro_batch_policy.h). 0 (the default): chosen each
  // step, one unless an offloading engine's recall would take at least a quarter of the step's
  // compute time, then two or one, whichever it has measured faster. 1 to 8: every decode step of
  // at least that many sequences. The tokens are the same for any count on a backend whose kernels
  // compute a row alike whatever the batch (the CPU backend's; the CUDA backend's GEMMs may pick
  // other algorithms for other row counts).
  int32_t micro_batches = 0;

  absl::Status Validate() const;
};

enum class RequestState : uint8_t { kQueued, kRunning, kFinished };

enum class FinishReason : uint8_t {
  kNone,        // still running
  kMaxTokens,   // generated max_tokens
  kStopToken,   // sampled a stop token (it is part of the output)
  kContext,     // reached max_context
  kCancelled,   // Cancel() or a sink that returned false
  kCapacity,    // can never fit the KV cache (this engine rejects those at Submit instead)
  kError,       // see RequestSnapshot::error
  kStopString,  // its text reached one of the stop strings
};

struct RequestStats {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double queue_ms = 0;  // submit to first scheduled step (0 while queued)
  double ttft_ms = 0;   // submit to first generated token (0 before it)
  double tpot_ms = 0;   // mean time between generated tokens after the first (0 below two)
  double total_ms = 0;  // submit to finish (or to now)
};

struct TokenEvent {
  RequestId id = 0;
  int32_t token = -1;  // -1 on an error event (no token)
  int32_t index = 0;   // 0 for the first generated token
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  // The raw logits [vocab] the token was drawn from (before the penalty and filters): for the
  // first token, those of the last prompt position. Only with EngineOptions::logits_to_host (else
  // empty, as on an error event); valid only during the sink call.
  std::span<const float> logits = {};
  // The text this event adds to the request's text, when the engine has a tokenizer: always at
  // UTF-8 character boundaries, so it may be empty (half a character, a control token, text that
  // may begin a stop string) and the last event carries what was held back. Valid only during the
  // sink call.
  std::string_view text = {};
};

// The events a request's sink sees, in order, all on the thread that runs Step(), after the step's
// forward pass, one sink call at a time, with no engine lock held (the sink may call Submit,
// Cancel, Snapshot and Release, also for its own request, but not Step):
//  - one event per generated token, index 0, 1, 2...; the last one has finished = true and its
//    reason (kMaxTokens, kStopToken or kContext);
//  - when the request fails (kError), one last event with token -1, index = the number of tokens
//    generated before, finished = true, reason kError (the status is in RequestSnapshot::error);
//    its earlier tokens stay valid.
// An event is delivered only if, when its sink is called, the request still exists (was not
// released) and Cancel was never called on it; this sink returning false counts as a Cancel.
// So a Cancel or Release also drops the request's events of the step in flight not delivered yet,
// a finished one included (Cancel of a request that finished in that step drops its last event,
// though the request keeps its reason). Cancel and Release called on another thread do not return
// while the request's sink runs: once they return OK, the sink is not running and is never called
// again, so what it uses may be freed. Called from within a sink (on its own request or another),
// they return without waiting; a sink that cancels or releases its own request finishes that call
// and gets no further one. Hence a sink must never wait for a thread that cancels or releases the
// sink's own request: that thread waits for the sink (a deadlock).
// Returning false cancels the request.
using TokenSink = std::function<bool(const TokenEvent&)>;

struct RequestSnapshot {
  RequestState state = RequestState::kQueued;
  FinishReason reason = FinishReason::kNone;
  absl::Status error;
  std::vector<int32_t> tokens;  // every generated token so far
  std::string text;             // the text of the events so far (empty without a tokenizer)
  RequestStats stats;
};

// A request's own offloading, within what the engine was created with: by default the engine's
// (EngineOptions::offload). An offloading engine may run a request densely (its whole
// context then stays in the KV cache, reserved at admission), or with its own budget, sink and
// window; the selection mode is the engine's, since the device slots are laid out for it.
struct RequestOffload {
  enum class Mode : uint8_t { kEngine, kDense, kSoloHead, kHeadWise };
  Mode mode = Mode::kEngine;  // kSoloHead / kHeadWise: must be the engine's mode
  std::optional<int32_t> budget_tokens = std::nullopt;
  std::optional<int32_t> sink_tokens = std::nullopt;
  std::optional<int32_t> window_tokens = std::nullopt;
};

// Totals since the engine was created, and its state now.
struct EngineStats {
  int64_t steps = 0;             // steps that ran a forward pass
  int64_t prefill_tokens = 0;    // prompt tokens computed
  int64_t decode_tokens = 0;     // generated tokens fed back
  int64_t generated_tokens = 0;  // tokens sampled
  int64_t finished_requests = 0;
  // Host waits for the device inside steps besides reading their outputs
  // (ModelRunner::step_host_waits).
  int64_t host_waits = 0;
  // Steps whose forward pass failed and ran once more (a fault of the step as a whole, such as a
  // copy that failed); a step that fails again fails its requests.
  int64_t retried_steps = 0;
  int32_t queued = 0;
  int32_t running = 0;
  int32_t kv_blocks = 0;         // blocks of the KV cache
  int32_t kv_blocks_in_use = 0;  // allocated or reserved by running requests
  int64_t kv_memory_bytes = 0;   // device bytes of the KV: cache, slots and summaries
  SparseAttentionStats sparse;   // with EngineOptions::offload
  // Placement (with EngineOptions::offload): the requests admitted resident and offloaded (by
  // the engine's placement or their own asking), the offloaded ones running now, and the times
  // the head of the queue waited for recall I/O; the rates placement last predicted from
  // (StepCosts, 0 before they are measured) and the recall time it predicted for a step with the
  // offloaded requests running.
  struct Admission {
    int64_t resident = 0;
    int64_t offloaded = 0;
    int64_t io_waits = 0;
    int64_t demoted = 0;   // running resident requests offloaded under memory pressure
    int64_t promoted = 0;  // running offloaded requests made resident when memory freed
    int64_t staged = 0;    // offloaded requests whose prompt the dense pool could not hold
    // Offloaded requests admitted with a budget below the engine's (min_budget_tokens).
    int64_t lowered_budgets = 0;
    // Prefix caching (OffloadConfig::prefix_cache): offloaded requests admitted with cached
    // blocks at the start of their prompt, and the prompt tokens those blocks spared prefill.
    int64_t prefix_hits = 0;
    int64_t prefix_hit_tokens = 0;
    int32_t offloaded_running = 0;
    double link_bytes_per_second = 0;
    double recall_bytes_per_row = 0;
    double compute_ms = 0;
    double predicted_recall_ms = 0;
  } admission;
  // Layer-wise scheduling (EngineOptions::micro_batches): the decode steps that ran as several
  // micro-batches, those the adaptive choice ran as one to measure compute, and the
  // micro-batches of the last step.
  struct MicroBatches {
    int64_t split_steps = 0;
    int64_t probe_steps = 0;
    int32_t last = 1;
  } micro_batches;
  // The offloaded KV (with EngineOptions::offload): host-tier blocks, those reserved by running
  // requests, device slots, those the running requests' budgets may take at once, and the
  // transfers and slot-cache counts so far.
  int32_t host_blocks = 0;
  int32_t host_blocks_in_use = 0;
  // Host-tier blocks in the prefix cache, held by running requests or not (the latter count as
  // free: the host tier gives their room to new blocks, the least recently released first).
  int32_t host_blocks_cached = 0;
  int32_t slot_blocks = 0;
  int32_t slot_blocks_in_use = 0;
  OffloadStats offload;
};

struct StepReport {
  int32_t scheduled = 0;  // sequences in this step
  int32_t prefill_tokens = 0;
  int32_t decode_tokens = 0;
  int32_t pending = 0;  // requests still queued or running after the step
};

class Engine {
 public:
  // Allocates the KV cache (ResourceExhausted when it does not fit the backend) and the step's
  // scratch memory. InvalidArgument for bad options. `tokenizer` may be null: then events carry
  // no text and stop strings are refused.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      std::shared_ptr<const Model> model, const EngineOptions& options,
      std::shared_ptr<const Tokenizer> tokenizer = nullptr);
  // Over a model split over ranks (docs/design/tensor-parallel.md): one runner a shard, each
  // with its own KV cache and offload tiers of its KV heads, the sizes of EngineOptions (and its
  // memory figures) a rank's; the results are the one-rank engine's. InvalidArgument for no
  // shard or several without ShardedModel::connect, and as ParallelRunner::Create says.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const ShardedModel& model, const EngineOptions& options,
      std::shared_ptr<const Tokenizer> tokenizer = nullptr);
  virtual ~Engine() = default;

  // Queues a request. InvalidArgument for an empty prompt, a token outside the vocabulary, a
  // prompt of max_context tokens or more, or bad parameters; ResourceExhausted when its worst
  // case (see above) can never fit the KV cache. The sink may be empty.
  absl::StatusOr<RequestId> Submit(std::vector<int32_t> prompt, const SamplingParams& params,
                                   TokenSink sink) {
    return Submit(std::move(prompt), params, std::move(sink), RequestOffload{});
  }
  // As above, with the request's own offloading: FailedPrecondition for a selection on an engine
  // that does not offload, InvalidArgument for another mode than the engine's or bad sizes.
  virtual absl::StatusOr<RequestId> Submit(std::vector<int32_t> prompt,
                                           const SamplingParams& params, TokenSink sink,
                                           const RequestOffload& offload) = 0;
  // Cancels the request: it finishes with kCancelled, keeps the tokens generated so far, and its
  // KV blocks are freed now (or, while a step that runs it is in flight, at that step's end).
  // NotFound for an unknown id. OK for one already finished: its state, reason and tokens stay,
  // and only its events not delivered yet are dropped. Returns only when the request's sink is not
  // running on another thread; after OK, the sink is never called again (see TokenSink).
  virtual absl::Status Cancel(RequestId id) = 0;
  // Runs one step: finishes cancelled requests, admits queued requests whose KV fits, runs one
  // forward pass over the batch, samples, then calls the sinks. A forward pass that fails runs
  // once more (EngineStats::retried_steps); failing again, it fails the requests of that batch
  // (kError with its status) and the step still returns OK; an error
  // status means the engine itself could not step. With nothing pending it does nothing.
  // FailedPrecondition, changing nothing, when called from within a sink.
  virtual absl::StatusOr<StepReport> Step() = 0;
  virtual absl::StatusOr<RequestSnapshot> Snapshot(RequestId id) const = 0;
  // Forgets a finished request (its events not delivered yet are dropped). FailedPrecondition
  // while it is queued or running, NotFound for an unknown id. Returns only when the request's
  // sink is not running on another thread; after OK, the sink is never called again (see
  // TokenSink), though the step in flight may still hold the sink object and destroy it later.
  virtual absl::Status Release(RequestId id) = 0;
  virtual int32_t pending() const = 0;
  virtual EngineStats stats() const = 0;

  virtual const Model& model() const = 0;
  virtual const Tokenizer* tokenizer() const = 0;  // null without one
  virtual const EngineOptions& options() const = 0;
};

}  // namespace pulse
