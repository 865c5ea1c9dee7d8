// Admission and batch formation (engine.h describes the policy). Owns the KV block pool and the
// queued and running requests; guarded by the engine's lock.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/sched/admission.h"
#include "core/sched/request.h"

namespace pulse {

struct SchedulerLimits {
  int32_t max_batch = 0;
  int32_t prefill_chunk = 0;
  int32_t max_step_tokens = 0;
  int32_t block_tokens = 0;
  int64_t block_bytes = 0;  // KV bytes of one block in every layer
  int32_t host_blocks = 0;  // the host tier of offloaded requests (0: none)
  int32_t slot_blocks = 0;  // the device tier's slots (0: none)
  AdmissionKind admission = AdmissionKind::kIoAdaptive;
  int32_t min_budget_tokens = 0;  // EngineOptions::min_budget_tokens
  bool prefix_cache = false;      // OffloadConfig::prefix_cache
  int32_t staging_blocks = 0;     // a layer of the staging area (StagedPrefill::Blocks)
};

// A running request's KV moved between the tiers by a change of placement, for the model runner
// to carry out before the next step (ModelRunner::MoveToHost, MoveToDevice).
struct TierMove {
  std::shared_ptr<Request> request;
  bool to_host = false;  // demoted (else promoted)
  // Pairwise: the device blocks written to the host blocks (demoted), or the host blocks
  // recalled into the device blocks (promoted). A promoted request's host blocks are released
  // (Scheduler::TakeReleasedHostBlocks).
  std::vector<int32_t> device_blocks = {};
  std::vector<int32_t> host_blocks = {};
};

// One request's share of a step: its tokens [begin, begin + count) are fed to the model.
struct ScheduledSequence {
  std::shared_ptr<Request> request;
  int32_t begin = 0;
  int32_t count = 0;
  bool decode = false;  // the one new token of a decoding request (else a prompt chunk)
  bool sample = false;  // the chunk ends the request's tokens: its last row's logits are sampled
};

class Scheduler {
 public:
  // Makes host-tier blocks [0, blocks) addressable (HostTier::Reserve, of every rank's tier).
  using PinHostBlocksFn = std::function<absl::Status(int32_t blocks)>;

  // `num_blocks`: the dense pool of device KV blocks. `pin_host_blocks` (empty without
  // offloading) grows the host tier as offloaded requests are admitted.
  Scheduler(const SchedulerLimits& limits, int32_t num_blocks, PinHostBlocksFn pin_host_blocks);

  const BlockPool& pool() const { return pool_; }
  const BlockPool& host_pool() const { return host_pool_; }
  int32_t slots_reserved() const { return slots_reserved_; }
  int32_t slot_capacity() const { return limits_.slot_blocks; }
  // Device KV blocks the request holds at most: its worst case, or for an offloaded request the
  // larger of its prompt and its resident set (PeakDeviceBlocks).
  int32_t BlocksNeeded(const Request& request) const;
  // Of an offloaded request whose prompt is prefilled staged: its resident set only.
  int32_t StagedBlocksNeeded(const Request& request) const;
  // OK when the request could run in an otherwise empty engine; ResourceExhausted saying which
  // capacity it exceeds otherwise.
  absl::Status CanEverFit(const Request& request) const;

  void Enqueue(std::shared_ptr<Request> request);
  // What Admit did: the requests admitted (now holding their block tables), and those refused
  // because the host tier cannot grow to hold them and nothing running will free it (with why).
  struct Admitted {
    struct Rejection {
      std::shared_ptr<Request> request;
      absl::Status status;
    };
    std::vector<std::shared_ptr<Request>> running;
    std::vector<Rejection> rejected;
    // Placement changes of running requests, in the order the runner must carry them out.
    std::vector<TierMove> moves;
  };
  // Admits queued requests in order while the batch has room, the admission policy places them
  // (a request the engine places runs resident or offloaded as AdmissionPolicy::Place says) and
  // their KV can be reserved (for an offloaded request: host blocks for its worst case, pinned in
  // the host tier, device blocks for BlocksNeeded, or StagedBlocksNeeded when it is staged, and
  // slots for its budget's picks).
  //
  // Under the I/O-adaptive policy placement also changes while requests run. When the head of
  // the queue is to run offloaded but the dense pool cannot hold its prompt, the decoding
  // resident requests the engine placed are demoted, the most recently admitted first, while
  // recall keeps up with one more offloaded request: each keeps its sinks and window on the
  // device and its other blocks in the host tier. When nothing waits, one decoding offloaded
  // request the engine placed is promoted a step, the first admitted first, when its whole worst
  // case fits the dense pool with room left as at admission and the recall it would still cost
  // (its remaining tokens at its own average recall a step) outweighs copying its context back.
  // Each request moves at most once each way.
  //
  // An offloaded request whose prompt the dense pool cannot hold even so, nor will once the
  // offloaded prompts being prefilled are in, is prefilled staged (core/offload/staged_prefill.h):
  // it holds only its resident set of device blocks, and once its prompt is in, a move recalls
  // that set before its first decode step. Between steps only.
  Admitted Admit();
  // This step's work: one token for every decoding request, then prompt chunks of the
  // prefilling requests in admission order within the step's token budget. Staged prompts'
  // chunks are steps of their own, every other step while other work runs, as many as the
  // step's tokens and the staging area hold.
  std::vector<ScheduledSequence> FormBatch();
  // Takes the request out of the queue or the running set and frees its KV blocks.
  void Remove(Request& request);
  // The host blocks whose last holder let them go since the last call (BlockPool::TakeReleased):
  // their device slots must be freed before the blocks serve another request.
  std::vector<int32_t> TakeReleasedHostBlocks() { return host_pool_.TakeReleased(); }

  int32_t queued() const { return static_cast<int32_t>(queue_.size()); }
  int32_t running() const { return static_cast<int32_t>(running_.size()); }

  // The rates placement predicts from: the engine records each decode step's.
  StepCosts& costs() { return costs_; }
  // Placement's counts so far and its rates now (EngineStats::admission).
  EngineStats::Admission admission_stats() const;

 private:
  // A step of staged prompts' chunks (FormBatch's when one waits).
  void FormStagedBatch(std::vector<ScheduledSequence>& batch) const;
  // Whether the request's whole worst case fits the dense pool now with room left for it
  // offloaded (AdmissionView::fits_resident); `held` device blocks it holds already count.
  bool FitsResident(const Request& request, int32_t held = 0) const;
  // Demotes the most recently admitted request that may be demoted; false when none may.
  bool DemoteOne(Admitted& admitted);
  // The moves that recall the resident sets of requests whose staged prompts are in.
  void MakeStagedResident(Admitted& admitted);
  // Promotes the first admitted request that may be promoted, if any.
  void PromoteOne(Admitted& admitted);
  // With prefix caching, names the full prompt blocks of the running requests that decoded a
  // step in the host pool: an offloaded request's host blocks (their write-back is enqueued by
  // then, before any reader's), and for a resident request, copies of its blocks that no block
  // of the cache holds yet, made by a move to host blocks the cache keeps unreferenced (skipped
  // when the host tier has no room).
  void CachePrompts(Admitted& admitted);
  // The keys of the request's full prompt blocks.
  std::vector<BlockKey> PromptKeys(const Request& request) const;
  // With prefix caching, the host blocks cached for the longest run of the request's full prompt
  // blocks from its start, leaving at least one prompt token to compute; empty when none is.
  // Keeps the request's prompt keys (Request::prompt_keys).
  std::vector<int32_t> CachedPrefix(Request& request) const;
  // Host tier blocks made addressable for the host pool's blocks plus `more`.
  absl::Status PinHostBlocks(int32_t more);
  // Device blocks the running offloaded requests hold or reserve beyond their resident sets:
  // a prompt prefilled with its blocks resident gives them back at its first decode step.
  int32_t BlocksOverResidentSets() const;
  // The running offloaded requests' recall bytes a step (AdmissionView::running_recall_bytes).
  double RunningRecallBytes() const;

  const SchedulerLimits limits_;
  BlockPool pool_;
  BlockPool host_pool_;
  const PinHostBlocksFn pin_host_blocks_;
  int32_t slots_reserved_ = 0;
  const AdmissionPolicy policy_;
  StepCosts costs_;
  int32_t offloaded_running_ = 0;
  bool last_batch_staged_ = false;    // the last batch formed was a staged prompt chunk
  EngineStats::Admission admission_;  // the counts
  std::deque<std::shared_ptr<Request>> queue_;
  std::vector<std::shared_ptr<Request>> running_;  // in admission order
};

}  // namespace pulse
