#include "core/sched/engine.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/backend/summary_radius.h"
#include "core/kv/block_table.h"
#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/model/step_batch.h"
#include "core/sched/request.h"
#include "core/sched/scheduler.h"

namespace pulse {
namespace {

constexpr int32_t kMaxBatch = 4096;
constexpr int32_t kMaxStepTokens = 1 << 16;
constexpr int32_t kMaxBlockTokens = 4096;
// The default KV cache: 8 full contexts, but never more than this.
constexpr int64_t kDefaultKvContexts = 8;
constexpr int64_t kDefaultKvBytes = int64_t{1} << 30;    // without a backend memory limit
constexpr int64_t kDefaultHostBytes = int64_t{4} << 30;  // the default host tier at most
constexpr double kDefaultKvShare = 0.7;                  // of a backend's free memory

// A token the backend drew, or why it could not draw one.
absl::StatusOr<int32_t> BackendToken(int32_t token) {
  if (token >= 0) return token;
  return absl::InvalidArgumentError(
      "cannot sample: a logit is nan or +inf, or none is finite (the logits stayed on the backend; "
      "EngineOptions::logits_to_host names the logit)");
}

// Streams the request's new token into its text: returns the piece the token's event carries,
// and turns `reason` into kStopString when a stop string ends the text. A finishing request's
// last piece includes the text held back.
std::string AppendText(Request& request, int32_t token, FinishReason& reason) {
  if (!request.text_stream) return {};
  TextStream::Piece piece = request.text_stream->Add(token);
  if (piece.stopped) {
    reason = FinishReason::kStopString;
  } else if (reason != FinishReason::kNone) {
    piece.text += request.text_stream->Finish();
  }
  request.text += piece.text;
  return std::move(piece.text);
}

// A token event to deliver once the engine lock is released.
struct Delivery {
  std::shared_ptr<const TokenSink> sink;
  TokenEvent event;  // its text is set from `text` at delivery
  std::string text;
};

class EngineImpl final : public Engine {
 public:
  // `dense_blocks`: the blocks of the runner's cache that are not offload slots.
  EngineImpl(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
             const EngineOptions& options, ModelRunner runner, const SchedulerLimits& limits,
             int32_t dense_blocks)
      : model_(std::move(model)),
        tokenizer_(std::move(tokenizer)),
        options_(options),
        runner_(std::move(runner)),
        scheduler_(limits, dense_blocks) {}

  using Engine::Submit;
  absl::StatusOr<RequestId> Submit(std::vector<int32_t> prompt, const SamplingParams& params,
                                   TokenSink sink, const RequestOffload& offload) override;
  absl::Status Cancel(RequestId id) override;
  absl::StatusOr<StepReport> Step() override;
  absl::StatusOr<RequestSnapshot> Snapshot(RequestId id) const override;
  absl::Status Release(RequestId id) override;
  int32_t pending() const override;
  EngineStats stats() const override;

  const Model& model() const override { return *model_; }
  const Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  const EngineOptions& options() const override { return options_; }

 private:
  absl::Status CheckPrompt(const std::vector<int32_t>& prompt) const;
  // The selection a request with `offload` decodes with (none: dense).
  absl::StatusOr<std::optional<SelectionOptions>> RequestSelection(
      const RequestOffload& offload) const;
  // Marks the request finished; its KV blocks go back now unless a step in flight uses them.
  void Finish(Request& request, FinishReason reason, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(Request& request, absl::Status error, Clock::time_point now,
            std::vector<Delivery>& deliveries) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admits, forms the batch into batch_ and marks its requests in_step.
  std::vector<ScheduledSequence> Schedule(Clock::time_point now, std::vector<Delivery>& deliveries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, step_mu_);
  // Applies a finished forward pass: samples, appends, finishes; fills the report.
  // `logits` (logits_to_host) or `tokens` (sampled by the backend) of the sampled rows.
  void Complete(const std::vector<ScheduledSequence>& work, const absl::Status& forward,
                std::span<const float> logits, std::span<const int32_t> tokens,
                Clock::time_point now, StepReport& report, std::vector<Delivery>& deliveries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls the sinks, one delivery at a time, skipping the events of requests released or
  // cancelled since they were produced.
  void Deliver(const std::vector<Delivery>& deliveries) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the delivery in progress; `keep` false (the sink returned false) cancels its request.
  void EndDelivery(RequestId id, bool keep) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CancelLocked(RequestId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReleaseLocked(RequestId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns once no sink of request `id` runs on another thread (releasing mu_ while it waits).
  // Returns at once when called from within the sink in progress (the step's thread).
  void AwaitNoDeliveryOf(RequestId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const Model> model_;
  const std::shared_ptr<const Tokenizer> tokenizer_;  // may be null
  const EngineOptions options_;                       // with every 0 resolved

  // Locks, and what waits for what. step_mu_ is taken before mu_, never while mu_ is held. mu_ is
  // held only for bookkeeping: never during the forward pass, a sink or a wait (Await releases
  // it). So a sink runs with step_mu_ held and mu_ free, and may call everything but Step.
  //
  // Delivery handshake: in one critical section under mu_, Deliver checks that the request still
  // exists and that Cancel was not called on it, and records it in delivering_ (with the step's
  // thread); it calls the sink with mu_ released, then clears delivering_ under mu_. Cancel and
  // Release make their change under mu_ first (so every later check skips the request's events),
  // then Await until delivering_ is not that request. So when they return, its sink is not
  // running; after an OK one it is never called again. Waits: Cancel and Release on another
  // thread wait for the step's thread to finish one sink call; the step's thread waits only for
  // mu_, which no waiter holds. Called from within the sink itself (delivery_thread_ is the
  // caller), they do not wait: they would wait for themselves. The one cycle left, a sink that
  // waits for a thread that cancels or releases the sink's own request, is forbidden (engine.h).
  absl::Mutex step_mu_;  // one Step at a time; held through the forward pass and the sinks
  ModelRunner runner_ ABSL_GUARDED_BY(step_mu_);
  StepBatch batch_ ABSL_GUARDED_BY(step_mu_);
  std::vector<float> logits_ ABSL_GUARDED_BY(step_mu_);  // [logit rows][vocab], grown as needed
  // The backend's draws of this step: one TokenSampling and token a logit row, and the
  // penalised ids the TokenSamplings point into.
  std::vector<TokenSampling> sampling_ ABSL_GUARDED_BY(step_mu_);
  std::vector<int32_t> penalised_ids_ ABSL_GUARDED_BY(step_mu_);
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(step_mu_);

  mutable absl::Mutex mu_;  // the requests and the delivery in progress
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RequestId, std::shared_ptr<Request>> requests_ ABSL_GUARDED_BY(mu_);
  // The requests Cancel was called on (also those already finished then), until their release:
  // their sinks are not called again.
  absl::flat_hash_set<RequestId> cancelled_ ABSL_GUARDED_BY(mu_);
  // Requests finished since the last step, whose sparse-attention state the step drops.
  std::vector<RequestId> sparse_finished_ ABSL_GUARDED_BY(mu_);
  // The request whose sink runs now, and the thread running it (Step's; a default id when none
  // runs).
  std::optional<RequestId> delivering_ ABSL_GUARDED_BY(mu_);
  std::thread::id delivery_thread_ ABSL_GUARDED_BY(mu_);
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  EngineStats totals_ ABSL_GUARDED_BY(mu_);  // the totals; the state fields are filled by stats()
};

absl::Status EngineImpl::CheckPrompt(const std::vector<int32_t>& prompt) const {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (prompt.size() >= static_cast<size_t>(options_.max_context)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the prompt has %u tokens: it must be shorter than max_context (%d)",
                        prompt.size(), options_.max_context));
  }
  const int32_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "prompt token %d at position %u is outside the vocabulary [0, %d)", prompt[i], i, vocab));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SelectionOptions>> EngineImpl::RequestSelection(
    const RequestOffload& offload) const {
  using Mode = RequestOffload::Mode;
  if (offload.mode == Mode::kDense) return std::nullopt;
  const bool changes = offload.mode != Mode::kEngine || offload.budget_tokens.has_value() ||
                       offload.sink_tokens.has_value() || offload.window_tokens.has_value();
  if (!changes) return options_.sparse_attention;
  if (!options_.sparse_attention) {
    return absl::FailedPreconditionError(
        "the request asks for offloaded attention, but this engine was created without it "
        "(EngineOptions::sparse_attention)");
  }
  SelectionOptions selection = *options_.sparse_attention;
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
  const ModelConfig& config = model_->config();
  PULSE_RETURN_IF_ERROR(BlockSelector::Create({.block_tokens = options_.block_tokens,
                                               .num_kv_heads = config.num_kv_heads,
                                               .head_dim = config.head_dim},
                                              config.num_heads, selection)
                            .status());
  return selection;
}

absl::StatusOr<RequestId> EngineImpl::Submit(std::vector<int32_t> prompt,
                                             const SamplingParams& params, TokenSink sink,
                                             const RequestOffload& offload) {
  PULSE_RETURN_IF_ERROR(CheckPrompt(prompt));
  PULSE_ASSIGN_OR_RETURN(const std::optional<SelectionOptions> selection,
                         RequestSelection(offload));
  PULSE_RETURN_IF_ERROR(params.Validate(model_->config().vocab_size));
  if (!params.stop_strings.empty() && tokenizer_ == nullptr) {
    return absl::FailedPreconditionError("stop strings need a tokenizer, and this engine has none");
  }
  absl::MutexLock lock(&mu_);
  auto request = std::make_shared<Request>(next_id_, std::move(prompt), params, std::move(sink),
                                           options_.max_context, tokenizer_.get(), Clock::now());
  request->offload = selection;
  PULSE_RETURN_IF_ERROR(scheduler_.CanEverFit(*request));
  const RequestId id = next_id_++;
  requests_.emplace(id, request);
  scheduler_.Enqueue(std::move(request));
  return id;
}

absl::Status EngineImpl::Cancel(RequestId id) {
  absl::MutexLock lock(&mu_);
  absl::Status status = CancelLocked(id);
  AwaitNoDeliveryOf(id);
  return status;
}

absl::Status EngineImpl::CancelLocked(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return absl::NotFoundError(absl::StrFormat("no request %d", id));
  cancelled_.insert(id);
  Request& request = *it->second;
  if (request.state != RequestState::kFinished) {
    Finish(request, FinishReason::kCancelled, Clock::now());
  }
  return absl::OkStatus();
}

void EngineImpl::AwaitNoDeliveryOf(RequestId id) {
  if (delivery_thread_ == std::this_thread::get_id()) return;  // from within the sink
  const auto delivered = [this, id]()
                             ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return delivering_ != id; };
  mu_.Await(absl::Condition(&delivered));
}

absl::StatusOr<RequestSnapshot> EngineImpl::Snapshot(RequestId id) const {
  absl::MutexLock lock(&mu_);
  const auto it = requests_.find(id);
  if (it == requests_.end()) return absl::NotFoundError(absl::StrFormat("no request %d", id));
  return it->second->Snapshot(Clock::now());
}

absl::Status EngineImpl::Release(RequestId id) {
  absl::MutexLock lock(&mu_);
  absl::Status status = ReleaseLocked(id);
  AwaitNoDeliveryOf(id);
  return status;
}

absl::Status EngineImpl::ReleaseLocked(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return absl::NotFoundError(absl::StrFormat("no request %d", id));
  if (it->second->state != RequestState::kFinished) {
    return absl::FailedPreconditionError(
        absl::StrFormat("request %d is still %s", id,
                        it->second->state == RequestState::kQueued ? "queued" : "running"));
  }
  requests_.erase(it);
  cancelled_.erase(id);
  return absl::OkStatus();
}

int32_t EngineImpl::pending() const {
  absl::MutexLock lock(&mu_);
  return scheduler_.queued() + scheduler_.running();
}

EngineStats EngineImpl::stats() const {
  absl::MutexLock lock(&mu_);
  EngineStats stats = totals_;
  stats.queued = scheduler_.queued();
  stats.running = scheduler_.running();
  stats.kv_blocks = scheduler_.pool().capacity();
  stats.kv_blocks_in_use = scheduler_.pool().capacity() - scheduler_.pool().available();
  stats.host_blocks = scheduler_.host_pool().capacity();
  stats.host_blocks_in_use = scheduler_.host_pool().capacity() - scheduler_.host_pool().available();
  stats.slot_blocks = scheduler_.slot_capacity();
  stats.slot_blocks_in_use = scheduler_.slots_reserved();
  return stats;
}

void EngineImpl::Finish(Request& request, FinishReason reason, Clock::time_point now) {
  ++totals_.finished_requests;
  if (request.offload) sparse_finished_.push_back(request.id);
  request.state = RequestState::kFinished;
  request.reason = reason;
  request.finished = now;
  if (!request.in_step) scheduler_.Remove(request);
}

void EngineImpl::Fail(Request& request, absl::Status error, Clock::time_point now,
                      std::vector<Delivery>& deliveries) {
  request.error = std::move(error);
  Finish(request, FinishReason::kError, now);
  if (request.sink != nullptr) {
    deliveries.push_back({request.sink,
                          {.id = request.id,
                           .token = -1,
                           .index = request.generated(),
                           .finished = true,
                           .reason = FinishReason::kError,
                           .logits = {}},
                          {}});
  }
}

std::vector<ScheduledSequence> EngineImpl::Schedule(Clock::time_point now,
                                                    std::vector<Delivery>& deliveries) {
  for (const std::shared_ptr<Request>& request : scheduler_.Admit()) {
    request->state = RequestState::kRunning;
    request->scheduled = now;
  }
  std::vector<ScheduledSequence> work = scheduler_.FormBatch();
  batch_.Clear();
  sampling_.clear();
  penalised_ids_.clear();
  std::vector<ScheduledSequence> scheduled;
  scheduled.reserve(work.size());
  for (ScheduledSequence& sequence : work) {
    Request& request = *sequence.request;
    const std::span<const int32_t> tokens =
        std::span<const int32_t>(request.tokens)
            .subspan(static_cast<size_t>(sequence.begin), static_cast<size_t>(sequence.count));
    const LogitRows logits = sequence.sample ? LogitRows::kLast : LogitRows::kNone;
    const int32_t end = sequence.begin + sequence.count;
    if (request.offload) {
      OffloadedBlockTable& blocks = *request.offloaded_blocks;
      if (sequence.decode) {
        // Only the sinks, the window and the block written stay resident; the blocks that left
        // the window were written back when they filled.
        const BlockRange evicted =
            NonResidentBlocks(sequence.begin, options_.block_tokens, *request.offload);
        blocks.Evict(evicted.begin, evicted.end);
        blocks.LimitDevice(scheduler_.ResidentLimit(request));
      }
      const absl::Status grown = blocks.Grow(end);
      if (!grown.ok()) {
        Fail(request, grown, now, deliveries);  // a bug: the reservations cover the worst case
        continue;
      }
      batch_.AddSequence(tokens, sequence.begin, blocks.device_blocks(), logits,
                         SparseSelection{*request.offload, request.id}, blocks.host_blocks());
    } else {
      const absl::Status grown = request.blocks->Grow(end);
      if (!grown.ok()) {
        // The reservation covers the worst case, so this is a bug; it fails only this request.
        Fail(request, grown, now, deliveries);
        continue;
      }
      batch_.AddSequence(tokens, sequence.begin, request.blocks->blocks(), logits);
    }
    if (sequence.sample && !options_.logits_to_host) {
      sampling_.push_back(request.sampler.Next(request.tokens, penalised_ids_));
    }
    request.in_step = true;
    scheduled.push_back(std::move(sequence));
  }
  return scheduled;
}

void EngineImpl::Complete(const std::vector<ScheduledSequence>& work, const absl::Status& forward,
                          std::span<const float> logits, std::span<const int32_t> tokens,
                          Clock::time_point now, StepReport& report,
                          std::vector<Delivery>& deliveries) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  const std::vector<int32_t>& eos_ids = model_->config().eos_token_ids;
  size_t row = 0;
  for (const ScheduledSequence& sequence : work) {
    Request& request = *sequence.request;
    request.in_step = false;
    if (forward.ok()) {
      (sequence.decode ? report.decode_tokens : report.prefill_tokens) += sequence.count;
    }
    const size_t sample_row = sequence.sample ? row++ : 0;
    const std::span<const float> row_logits = sequence.sample && !logits.empty()
                                                  ? logits.subspan(vocab * sample_row, vocab)
                                                  : std::span<const float>();
    if (request.state == RequestState::kFinished) {
      // Cancelled while the step was in flight: its blocks go back now, and nothing is sampled.
      scheduler_.Remove(request);
      continue;
    }
    if (!forward.ok()) {
      Fail(request, forward, now, deliveries);
      continue;
    }
    request.computed += sequence.count;
    if (!sequence.sample) continue;
    const absl::StatusOr<int32_t> token = options_.logits_to_host
                                              ? request.sampler.Sample(row_logits, request.tokens)
                                              : BackendToken(tokens[sample_row]);
    if (!token.ok()) {
      Fail(request, token.status(), now, deliveries);
      continue;
    }
    request.tokens.push_back(*token);
    ++totals_.generated_tokens;
    if (!request.first_token) request.first_token = now;
    request.last_token = now;
    FinishReason reason = request.FinishAfterToken(eos_ids);
    std::string text = AppendText(request, *token, reason);
    if (reason != FinishReason::kNone) Finish(request, reason, now);
    if (request.sink != nullptr) {
      deliveries.push_back({request.sink,
                            {.id = request.id,
                             .token = *token,
                             .index = request.generated() - 1,
                             .finished = reason != FinishReason::kNone,
                             .reason = reason,
                             .logits = row_logits},
                            std::move(text)});
    }
  }
  report.scheduled = static_cast<int32_t>(work.size());
  if (!work.empty()) ++totals_.steps;
  totals_.prefill_tokens += report.prefill_tokens;
  totals_.decode_tokens += report.decode_tokens;
  report.pending = scheduler_.queued() + scheduler_.running();
}

void EngineImpl::Deliver(const std::vector<Delivery>& deliveries) {
  for (const Delivery& delivery : deliveries) {
    const RequestId id = delivery.event.id;
    {
      absl::MutexLock lock(&mu_);
      if (!requests_.contains(id) || cancelled_.contains(id)) continue;  // released or cancelled
      delivering_ = id;
      delivery_thread_ = std::this_thread::get_id();
    }
    TokenEvent event = delivery.event;
    event.text = delivery.text;
    bool keep = false;
    try {
      keep = (*delivery.sink)(event);
    } catch (...) {
      EndDelivery(id, false);
      throw;
    }
    EndDelivery(id, keep);
  }
}

void EngineImpl::EndDelivery(RequestId id, bool keep) {
  absl::MutexLock lock(&mu_);
  delivering_.reset();
  delivery_thread_ = std::thread::id();
  if (!keep) CancelLocked(id).IgnoreError();  // NotFound: the sink released its request
}

absl::StatusOr<StepReport> EngineImpl::Step() {
  absl::MutexLock step_lock(&step_mu_);
  std::vector<Delivery> deliveries;
  std::vector<ScheduledSequence> work;
  std::vector<RequestId> finished;
  {
    absl::MutexLock lock(&mu_);
    finished.swap(sparse_finished_);
    work = Schedule(Clock::now(), deliveries);
  }
  // Between steps no slot is in use, so this cannot fail.
  for (const RequestId id : finished) runner_.ForgetSparse(id).IgnoreError();
  StepReport report;
  absl::Status forward;
  std::span<float> logits;
  if (!work.empty() && options_.logits_to_host) {
    const size_t values = static_cast<size_t>(batch_.num_logit_rows()) *
                          static_cast<size_t>(model_->config().vocab_size);
    if (logits_.size() < values) logits_.resize(values);
    logits = std::span<float>(logits_).first(values);
    forward = runner_.Forward(batch_, logits);
  } else if (!work.empty()) {
    tokens_.resize(sampling_.size());
    forward = runner_.ForwardAndSample(batch_, sampling_, penalised_ids_, tokens_);
  }
  {
    absl::MutexLock lock(&mu_);
    Complete(work, forward, logits, tokens_, Clock::now(), report, deliveries);
    totals_.sparse = runner_.sparse_stats();
    totals_.offload = runner_.offload_stats();
  }
  Deliver(deliveries);
  return report;
}

}  // namespace

absl::Status EngineOptions::Validate() const {
  if (max_batch < 1 || max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_batch = %d is outside [1, %d]", max_batch, kMaxBatch));
  }
  if (prefill_chunk < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("prefill_chunk = %d must be >= 1", prefill_chunk));
  }
  if (max_step_tokens < max_batch || max_step_tokens > kMaxStepTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_step_tokens = %d is outside [max_batch = %d, %d]", max_step_tokens,
                        max_batch, kMaxStepTokens));
  }
  if (block_tokens < 1 || block_tokens > kMaxBlockTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block_tokens = %d is outside [1, %d]", block_tokens, kMaxBlockTokens));
  }
  if (kv_capacity_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_capacity_tokens = %d must be >= 0", kv_capacity_tokens));
  }
  if (max_context < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_context = %d must be >= 0", max_context));
  }
  if (!SummaryRadiusValid(offload_summary_radius)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offload_summary_radius = %g is outside [0, 1]", offload_summary_radius));
  }
  for (const auto& [name, tokens] : {std::pair{"offload_host_tokens", offload_host_tokens},
                                     std::pair{"offload_slot_tokens", offload_slot_tokens}}) {
    if (tokens < 0 || tokens > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s = %d is outside [0, %d]", name, tokens,
                                                        std::numeric_limits<int32_t>::max()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<const Model> model,
                                                       const EngineOptions& options,
                                                       std::shared_ptr<const Tokenizer> tokenizer) {
  if (model == nullptr) return absl::InvalidArgumentError("Engine::Create: no model");
  PULSE_RETURN_IF_ERROR(options.Validate());
  const ModelConfig& config = model->config();
  EngineOptions resolved = options;
  if (resolved.max_context == 0) resolved.max_context = config.max_position;
  if (resolved.max_context < 2 || resolved.max_context > config.max_position) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_context = %d is outside [2, the model's context %d]",
                        resolved.max_context, config.max_position));
  }
  Backend& backend = model->backend();
  const PagedKvLayout layout{.block_tokens = resolved.block_tokens,
                             .num_kv_heads = config.num_kv_heads,
                             .head_dim = config.head_dim,
                             .type = backend.kv_type()};
  // KV bytes of one token in every layer.
  const int64_t token_bytes =
      int64_t{config.num_layers} * layout.block_bytes() / layout.block_tokens;
  if (resolved.kv_capacity_tokens == 0) {
    // A backend with memory of its own (a GPU) gives the KV cache a share of what is free.
    const size_t available = backend.AvailableBytes();
    const int64_t kv_bytes =
        available == 0 ? kDefaultKvBytes : static_cast<int64_t>(available * kDefaultKvShare);
    resolved.kv_capacity_tokens = std::max<int64_t>(
        resolved.block_tokens,
        std::min(kDefaultKvContexts * resolved.max_context, kv_bytes / token_bytes));
  }
  const int64_t num_blocks =
      (resolved.kv_capacity_tokens + resolved.block_tokens - 1) / resolved.block_tokens;
  SchedulerLimits limits{.max_batch = resolved.max_batch,
                         .prefill_chunk = resolved.prefill_chunk,
                         .max_step_tokens = resolved.max_step_tokens,
                         .block_tokens = resolved.block_tokens};
  std::optional<OffloadOptions> offload;
  if (resolved.sparse_attention) {
    PULSE_RETURN_IF_ERROR(
        BlockSelector::Create(layout, config.num_heads, *resolved.sparse_attention).status());
    if (resolved.offload_host_tokens == 0) {
      resolved.offload_host_tokens =
          std::min(kDefaultKvContexts * resolved.max_context, kDefaultHostBytes / token_bytes);
    }
    if (resolved.offload_slot_tokens == 0) {
      resolved.offload_slot_tokens =
          std::min(int64_t{resolved.max_batch} *
                       std::min(resolved.sparse_attention->budget_tokens, resolved.max_context),
                   kDefaultKvBytes / token_bytes);
    }
    limits.host_blocks = BlocksForTokens(resolved.offload_host_tokens, resolved.block_tokens);
    limits.slot_blocks = BlocksForTokens(resolved.offload_slot_tokens, resolved.block_tokens);
    offload = OffloadOptions{.host_blocks = limits.host_blocks,
                             .slot_blocks = limits.slot_blocks,
                             .mode = resolved.sparse_attention->mode,
                             .eviction = resolved.offload_eviction,
                             .executor = resolved.offload_executor};
  }
  if (num_blocks + limits.slot_blocks > std::numeric_limits<int32_t>::max() ||
      limits.host_blocks < 0 || limits.slot_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kv_capacity_tokens = %d, offload_host_tokens = %d and offload_slot_tokens = %d are too "
        "many blocks of %d tokens",
        resolved.kv_capacity_tokens, resolved.offload_host_tokens, resolved.offload_slot_tokens,
        resolved.block_tokens));
  }
  PULSE_ASSIGN_OR_RETURN(KvCache cache,
                         KvCache::Create(backend, layout, config.num_layers,
                                         static_cast<int32_t>(num_blocks + limits.slot_blocks)));
  const ModelRunnerOptions runner_options{
      .max_step_tokens = resolved.max_step_tokens,
      .max_seqs = resolved.max_batch,
      .max_blocks_per_seq = BlocksForTokens(resolved.max_context - 1, resolved.block_tokens),
      .offload = offload,
      .summary_radius = resolved.offload_summary_radius,
      .decode_graphs = resolved.decode_graphs};
  PULSE_ASSIGN_OR_RETURN(ModelRunner runner,
                         ModelRunner::Create(model, std::move(cache), runner_options));
  if (tokenizer != nullptr && tokenizer->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the tokenizer has %d tokens, more than the model's vocabulary (%d)",
                        tokenizer->vocab_size(), config.vocab_size));
  }
  return std::make_unique<EngineImpl>(std::move(model), std::move(tokenizer), resolved,
                                      std::move(runner), limits, static_cast<int32_t>(num_blocks));
}

}  // namespace pulse
