#include "core/sched/engine.h"

#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/model/forward.h"
#include "core/sched/capacity.h"
#include "core/sched/micro_batch_policy.h"
#include "core/sched/request.h"
#include "core/sched/request_options.h"
#include "core/sched/scheduler.h"
#include "core/sched/step_builder.h"
#include "core/sched/step_completion.h"

namespace pulse {
namespace {

// The copy that calibrates the link at start: long enough to dwarf a copy's fixed cost.
constexpr int64_t kCalibrationBytes = int64_t{8} << 20;

// A step's rows as the micro-batch choice and the step costs see them: its sequences when it
// decodes only (0 when it has a prompt chunk), and of them the offloaded ones.
struct DecodeRows {
  int32_t decode = 0;
  int32_t offloaded = 0;
};

DecodeRows CountDecodeRows(const std::vector<ScheduledSequence>& work) {
  DecodeRows rows;
  for (const ScheduledSequence& sequence : work) {
    if (!sequence.decode) return {};
    ++rows.decode;
    if (sequence.request->offloaded_blocks) ++rows.offloaded;
  }
  return rows;
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
             EngineCapacity capacity)
      : model_(std::move(model)),
        tokenizer_(std::move(tokenizer)),
        options_(capacity.options),
        kv_memory_bytes_(capacity.kv_memory_bytes),
        runner_(std::move(capacity.runner)),
        step_builder_(options_.block_tokens, /*sample_on_backend=*/!options_.logits_to_host),
        scheduler_(capacity.limits, capacity.dense_blocks,
                   runner_.has_host_tier()
                       ? [this](int32_t blocks) { return runner_.ReserveHostBlocks(blocks); }
                       : Scheduler::PinHostBlocksFn()),
        micro_batches_(options_.micro_batches) {
    // The link's rate from the start (engine stats); without it (no pinned memory to spare),
    // the first recalls measure it.
    if (options_.offload) {
      const absl::StatusOr<double> link = runner_.CalibrateLink(kCalibrationBytes);
      if (link.ok()) scheduler_.costs().Calibrate(*link);
    }
  }

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
  // Marks the request finished; its KV blocks go back now unless a step in flight uses them.
  void Finish(Request& request, FinishReason reason, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(Request& request, absl::Status error, Clock::time_point now,
            std::vector<Delivery>& deliveries) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admits, builds the step's inputs into step_builder_ and marks its requests in_step; `moves`
  // gets the placement changes the runner must carry out before the step.
  std::vector<ScheduledSequence> Schedule(Clock::time_point now, std::vector<Delivery>& deliveries,
                                          std::vector<TierMove>& moves)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, step_mu_);
  // Carries out the placement changes on the runner, in order.
  absl::Status Move(const std::vector<TierMove>& moves) ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // The forward pass of the step built in step_builder_, into `forward`.
  void RunForward(int32_t micro_batches, ForwardResult& forward)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // The micro-batches the step of `work` runs as (MicroBatchPolicy).
  int32_t MicroBatches(const std::vector<ScheduledSequence>& work)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a finished forward pass (CompleteStep), finishes the requests it ends and fills the
  // report.
  void Complete(const std::vector<ScheduledSequence>& work, const ForwardResult& forward,
                Clock::time_point now, StepReport& report, std::vector<Delivery>& deliveries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives each offloaded request that decoded its recall, and the scheduler's StepCosts a
  // decode-only step's time and recalls (`offload`: the runner's totals after it;
  // totals_.offload still holds those before), run as `micro_batches`.
  void RecordCosts(const std::vector<ScheduledSequence>& work, Clock::duration time,
                   const OffloadStats& offload, int32_t micro_batches)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, step_mu_);
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
  // Whether the caller is the sink in progress (the step's thread, inside a sink call).
  bool InSink() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return delivery_thread_ == std::this_thread::get_id();
  }

  const std::shared_ptr<const Model> model_;
  const std::shared_ptr<const Tokenizer> tokenizer_;  // may be null
  const EngineOptions options_;                       // with every 0 resolved
  const int64_t kv_memory_bytes_;

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
  ParallelRunner runner_ ABSL_GUARDED_BY(step_mu_);
  StepBuilder step_builder_ ABSL_GUARDED_BY(step_mu_);
  std::vector<float> logits_ ABSL_GUARDED_BY(step_mu_);    // [logit rows][vocab], grown as needed
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(step_mu_);  // the backend's draws, one a logit row

  mutable absl::Mutex mu_;  // the requests and the delivery in progress
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  MicroBatchPolicy micro_batches_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RequestId, std::shared_ptr<Request>> requests_ ABSL_GUARDED_BY(mu_);
  // The requests Cancel was called on (also those already finished then), until their release:
  // their sinks are not called again.
  absl::flat_hash_set<RequestId> cancelled_ ABSL_GUARDED_BY(mu_);
  // Offloaded requests finished since the last step: the step forgets what sparse attention
  // keeps of them (the slots of their host blocks go with the host pool's released blocks).
  std::vector<RequestId> sparse_finished_ ABSL_GUARDED_BY(mu_);
  // The request whose sink runs now, and the thread running it (Step's; a default id when none
  // runs).
  std::optional<RequestId> delivering_ ABSL_GUARDED_BY(mu_);
  std::thread::id delivery_thread_ ABSL_GUARDED_BY(mu_);
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  EngineStats totals_ ABSL_GUARDED_BY(mu_);  // the totals; the state fields are filled by stats()
};

absl::StatusOr<RequestId> EngineImpl::Submit(std::vector<int32_t> prompt,
                                             const SamplingParams& params, TokenSink sink,
                                             const RequestOffload& offload) {
  const ModelConfig& config = model_->config();
  PULSE_RETURN_IF_ERROR(CheckPrompt(prompt, options_.max_context, config.vocab_size));
  PULSE_ASSIGN_OR_RETURN(const std::optional<SelectionOptions> selection,
                         RequestSelection(offload, options_, config));
  PULSE_RETURN_IF_ERROR(params.Validate(config.vocab_size));
  if (!params.stop_strings.empty() && tokenizer_ == nullptr) {
    return absl::FailedPreconditionError("stop strings need a tokenizer, and this engine has none");
  }
  absl::MutexLock lock(&mu_);
  auto request = std::make_shared<Request>(next_id_, std::move(prompt), params, std::move(sink),
                                           options_.max_context, tokenizer_.get(), Clock::now());
  request->offload = selection;
  request->placed_by_engine = TakesEngineOffload(offload);
  if (request->placed_by_engine) request->engine_selection = selection;
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
  if (InSink()) return;
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
  stats.kv_memory_bytes = kv_memory_bytes_;
  stats.host_blocks = scheduler_.host_pool().capacity();
  stats.host_blocks_in_use = scheduler_.host_pool().capacity() - scheduler_.host_pool().available();
  stats.host_blocks_cached = scheduler_.host_pool().cached();
  stats.slot_blocks = scheduler_.slot_capacity();
  stats.slot_blocks_in_use = scheduler_.slots_reserved();
  stats.admission = scheduler_.admission_stats();
  stats.micro_batches = {.split_steps = micro_batches_.split_steps(),
                         .probe_steps = micro_batches_.probe_steps(),
                         .last = micro_batches_.last()};
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
  RecordFailure(request, std::move(error), deliveries);
  Finish(request, FinishReason::kError, now);
}

std::vector<ScheduledSequence> EngineImpl::Schedule(Clock::time_point now,
                                                    std::vector<Delivery>& deliveries,
                                                    std::vector<TierMove>& moves) {
  Scheduler::Admitted admitted = scheduler_.Admit();
  moves = std::move(admitted.moves);
  for (const std::shared_ptr<Request>& request : admitted.running) {
    request->state = RequestState::kRunning;
    request->scheduled = now;
  }
  for (Scheduler::Admitted::Rejection& rejection : admitted.rejected) {
    Fail(*rejection.request, std::move(rejection.status), now, deliveries);
  }
  std::vector<ScheduledSequence> work = scheduler_.FormBatch();
  step_builder_.Clear();
  std::vector<ScheduledSequence> scheduled;
  scheduled.reserve(work.size());
  for (ScheduledSequence& sequence : work) {
    const absl::Status added = step_builder_.Add(sequence);
    if (!added.ok()) {
      // The reservation covers the worst case, so this is a bug; it fails only this request.
      Fail(*sequence.request, added, now, deliveries);
      continue;
    }
    sequence.request->in_step = true;
    scheduled.push_back(std::move(sequence));
  }
  return scheduled;
}

void EngineImpl::RunForward(int32_t micro_batches, ForwardResult& forward) {
  if (options_.logits_to_host) {
    const size_t values = static_cast<size_t>(step_builder_.batch().num_logit_rows()) *
                          static_cast<size_t>(model_->config().vocab_size);
    if (logits_.size() < values) logits_.resize(values);
    const std::span<float> logits = std::span<float>(logits_).first(values);
    forward.status = runner_.Forward(step_builder_.batch(), logits, micro_batches);
    forward.logits = logits;
    return;
  }
  tokens_.resize(step_builder_.sampling().size());
  forward.status = runner_.ForwardAndSample(step_builder_.batch(), step_builder_.sampling(),
                                            step_builder_.penalised_ids(), tokens_, micro_batches);
  forward.tokens = tokens_;
}

absl::Status EngineImpl::Move(const std::vector<TierMove>& moves) {
  for (const TierMove& move : moves) {
    if (move.to_host) {
      PULSE_RETURN_IF_ERROR(runner_.MoveToHost(move.device_blocks, move.host_blocks));
    } else {
      PULSE_RETURN_IF_ERROR(runner_.MoveToDevice(move.host_blocks, move.device_blocks));
    }
  }
  return absl::OkStatus();
}

void EngineImpl::Complete(const std::vector<ScheduledSequence>& work, const ForwardResult& forward,
                          Clock::time_point now, StepReport& report,
                          std::vector<Delivery>& deliveries) {
  const StepCompletion completion = CompleteStep(work, forward, model_->config(), now, deliveries);
  for (const RequestEnd& end : completion.ends) {
    if (end.reason) {
      Finish(*end.request, *end.reason, now);
    } else {
      scheduler_.Remove(*end.request);  // cancelled while the step was in flight
    }
  }
  report.scheduled = static_cast<int32_t>(work.size());
  report.prefill_tokens = completion.prefill_tokens;
  report.decode_tokens = completion.decode_tokens;
  report.pending = scheduler_.queued() + scheduler_.running();
  if (!work.empty()) ++totals_.steps;
  totals_.prefill_tokens += report.prefill_tokens;
  totals_.decode_tokens += report.decode_tokens;
  totals_.generated_tokens += completion.generated_tokens;
}

int32_t EngineImpl::MicroBatches(const std::vector<ScheduledSequence>& work) {
  const DecodeRows rows = CountDecodeRows(work);
  return micro_batches_.Choose(
      {.decode_rows = rows.decode, .offloaded_rows = rows.offloaded, .costs = &scheduler_.costs()});
}

void EngineImpl::RecordCosts(const std::vector<ScheduledSequence>& work, Clock::duration time,
                             const OffloadStats& offload, int32_t micro_batches) {
  for (const ScheduledSequence& sequence : work) {
    Request& request = *sequence.request;
    if (sequence.decode && request.offloaded_blocks) {
      request.recall.Record(runner_.sparse_stats(request.id).recall_bytes);
    }
  }
  const DecodeRows rows = CountDecodeRows(work);
  if (rows.decode == 0) return;
  const double seconds = std::chrono::duration<double>(time).count();
  micro_batches_.Observe(seconds, rows.decode, runner_.step_first_of_shape());
  scheduler_.costs().Record(
      {.seconds = seconds,
       .offloaded_rows = rows.offloaded,
       .recall_bytes = offload.recall_bytes - totals_.offload.recall_bytes,
       .recall_seconds = offload.recall_seconds - totals_.offload.recall_seconds,
       .writeback_seconds = offload.writeback_seconds - totals_.offload.writeback_seconds,
       .overlapped = micro_batches > 1});
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
  {
    // A sink runs inside a step, holding step_mu_: stepping from it would wait for itself.
    absl::MutexLock lock(&mu_);
    if (InSink()) {
      return absl::FailedPreconditionError(
          "Step called from within a token sink (callback): return from it and step after");
    }
  }
  absl::MutexLock step_lock(&step_mu_);
  std::vector<Delivery> deliveries;
  std::vector<ScheduledSequence> work;
  std::vector<RequestId> finished;
  std::vector<int32_t> released;
  std::vector<TierMove> moves;
  int32_t micro_batches = 1;
  {
    absl::MutexLock lock(&mu_);
    finished.swap(sparse_finished_);
    work = Schedule(Clock::now(), deliveries, moves);
    released = scheduler_.TakeReleasedHostBlocks();
    if (!work.empty()) micro_batches = MicroBatches(work);
  }
  for (const RequestId id : finished) runner_.ForgetSparse(id).IgnoreError();
  const Clock::time_point start = Clock::now();
  ForwardResult forward{.logits_to_host = options_.logits_to_host};
  // Between steps, the slots of the host blocks that lost their last holder are freed before
  // another holder looks them up (a finished request's, a promoted one's, a shared block's
  // last). A move that fails leaves its request's KV incomplete: the step fails as a forward
  // pass would.
  forward.status = runner_.FreeSlots(released);
  if (forward.status.ok()) forward.status = Move(moves);
  const bool run = forward.status.ok() && !work.empty();
  bool retried = false;
  if (run) {
    RunForward(micro_batches, forward);
    if (!forward.status.ok()) {
      // A fault of the step as a whole (a copy that failed, say): the runner abandoned it and
      // its inputs stand, so it runs once more (the KV it wrote is written again, the same) and
      // fails its requests only if it fails again.
      retried = true;
      RunForward(micro_batches, forward);
    }
  }
  StepReport report;
  {
    absl::MutexLock lock(&mu_);
    const Clock::time_point end = Clock::now();
    Complete(work, forward, end, report, deliveries);
    if (run) totals_.host_waits += runner_.step_host_waits();
    if (retried) ++totals_.retried_steps;
    const OffloadStats offload = runner_.offload_stats();
    if (forward.status.ok()) {
      RecordCosts(work, end - start, offload, runner_.step_micro_batches());
    }
    totals_.sparse = runner_.sparse_stats();
    totals_.offload = offload;
  }
  Deliver(deliveries);
  return report;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<const Model> model,
                                                       const EngineOptions& options,
                                                       std::shared_ptr<const Tokenizer> tokenizer) {
  if (model == nullptr) return absl::InvalidArgumentError("Engine::Create: no model");
  return Create(ShardedModel{.shards = {std::move(model)}}, options, std::move(tokenizer));
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const ShardedModel& model,
                                                       const EngineOptions& options,
                                                       std::shared_ptr<const Tokenizer> tokenizer) {
  if (model.shards.empty() || model.shards.front() == nullptr) {
    return absl::InvalidArgumentError("Engine::Create: no model");
  }
  PULSE_RETURN_IF_ERROR(options.Validate());
  PULSE_ASSIGN_OR_RETURN(EngineCapacity capacity, AllocateCapacity(model, options));
  const int32_t vocab_size = model.shards.front()->config().vocab_size;
  if (tokenizer != nullptr && tokenizer->vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the tokenizer has %d tokens, more than the model's vocabulary (%d)",
                        tokenizer->vocab_size(), vocab_size));
  }
  return std::make_unique<EngineImpl>(model.shards.front(), std::move(tokenizer),
                                      std::move(capacity));
}

}  // namespace pulse
