// Sparse decode attention over offloaded KV: the offload layer's one interface to the model
// runner. For every sequence of a step that has a selection and one new token, each layer's
// query attends only to its sink blocks, its recent window and the candidate blocks whose
// summaries score highest, within a token budget; sequences without one, and prompt chunks,
// attend densely. An offloaded sequence's picks resolve through the device tier's directory and
// misses are recalled from the host tier, all on the device: the host plans a step once
// (Plan), and a layer (AfterAppend, Attend) only enqueues ops, so a step waits for the device
// only when its tokens are read. With a budget that covers the context the selection is every
// block, so the result is dense attention's bit for bit.
//
// A step per micro-batch, as data (docs/design/architecture.md): Plan uploads the step's
// candidates (their summaries, query rows and blocks), its rows' fixed blocks and the blocks it
// fills, and keeps the blocks its sequences' resident sets gave up in free device slots. Per
// layer: AfterAppend summarizes the filled blocks and writes the offloaded ones back
// to the host tier (copy stream, after compute); Attend scores every candidate for every query
// head (ScoreBlocks), aggregates the heads into each set's scores (AggregateScores), takes each
// set's top picks (SelectTopBlocks), turns them into block tables through the directory
// (BuildSparseTables: hits, victims, the recall list), recalls the misses (EnqueueRecall on the
// copy stream, which attention waits for on the device) and attends. FinishStep makes compute
// wait for the write-backs; Collect reads the step's counters (copied back with the tokens)
// into the statistics. Not thread-safe: the model runner serializes it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/backend/backend.h"
#include "core/backend/communicator.h"
#include "core/base/status.h"
#include "core/kv/kv_cache.h"
#include "core/offload/block_summaries.h"
#include "core/offload/host_tier.h"
#include "core/offload/offload_config.h"
#include "core/offload/selection.h"
#include "core/offload/slot_directory.h"
#include "core/offload/staged_prefill.h"

namespace pulse {

// One sequence of a step as the offload layer sees it.
struct SparseSequence {
  int32_t first_row = 0;  // its first query row in the step
  int32_t new_tokens = 0;
  int32_t kv_len = 0;
  std::span<const int32_t> blocks;       // device block of each logical block; -1: not resident
  std::span<const int32_t> host_blocks;  // host-tier block of each; empty: not offloaded
  // Offloaded: its blocks that left the resident set since its last step (dense block -> host
  // block), whole in those dense blocks until this step writes them. Kept in the device tier's
  // free slots (Backend::AdoptFreeSlots) so that a fresh prompt's blocks are hits.
  std::span<const WriteBackEntry> departed;
  const SelectionOptions* selection = nullptr;  // null: dense attention
  uint64_t key = 0;                             // names the sequence across steps (statistics)
};

// Totals over every (sparse sequence, layer, step, set) selection.
struct SparseAttentionStats {
  int64_t selections = 0;        // (sequence, layer, set) selections made
  int64_t candidate_blocks = 0;  // blocks scored
  int64_t picked_blocks = 0;     // candidates selected
  int64_t reused_blocks = 0;     // picked blocks the same set picked the step before
  int64_t attended_tokens = 0;   // tokens the sparse rows attended to
  int64_t context_tokens = 0;    // tokens they would have attended to densely
  int64_t recall_bytes = 0;      // moved host -> device for their picks that missed the slots
  // Host time planning the steps' selections (Plan); the device does not wait for it. Totals
  // only (0 for a sequence).
  double planning_seconds = 0;
};

struct CacheStats {
  int64_t hits = 0;  // offloaded picks found in a slot
  int64_t misses = 0;
  int64_t evictions = 0;

  friend bool operator==(const CacheStats&, const CacheStats&) = default;
};

struct OffloadStats {
  int64_t recall_plans = 0;   // (step, layer) recalls enqueued
  int64_t recall_chunks = 0;  // contiguous pieces moved host -> device (a block, or K and V)
  int64_t recall_bytes = 0;
  double recall_seconds = 0;     // the copy engine's time on the recalls
  int64_t writeback_blocks = 0;  // (layer, block) written device -> host
  int64_t writeback_bytes = 0;
  double writeback_seconds = 0;  // the copy engine's time on the steps' write-backs
  CacheStats cache;
  StagedPrefillStats staged;  // prompt chunks prefilled staged (not counted above)
};

// The largest step a SparseAttention serves.
struct SparseLimits {
  int32_t max_seqs = 1;
  int32_t max_blocks_per_seq = 1;
  int32_t max_step_tokens = 1;
  int32_t num_heads = 1;  // the query heads of the cache's KV heads
  // The tensor-parallel ranks (null at one): SoloHead's one block set is then picked from every
  // rank's query heads, whose bounds each rank gathers, so all ranks pick the same blocks.
  Communicator* ranks = nullptr;
};

// One micro-batch's step: its uploaded plan, the buffers its layers write and its copy events.
// Made by SparseAttention::NewStep; reused step after step.
class SparseStep;

class SparseAttention {
 public:
  // Over `cache`, whose blocks [0, dense_blocks) are the dense pool and, when `config` has both
  // tiers (host_tokens and slot_tokens > 0), the next slot_tokens / block_tokens blocks the
  // device tier's slots. InvalidArgument for a config that does not fit the cache or the model;
  // ResourceExhausted when the summaries or the directory do not fit the backend. The cache's
  // memory must outlive this object (the KvCache object itself may move).
  static absl::StatusOr<std::unique_ptr<SparseAttention>> Create(Backend& backend,
                                                                 const KvCache& cache,
                                                                 int32_t dense_blocks,
                                                                 const OffloadConfig& config,
                                                                 const SparseLimits& limits);
  ~SparseAttention();

  // A micro-batch's state, for steps of at most `max_seqs` sequences and `max_step_tokens`
  // tokens (InvalidArgument past the limits').
  absl::StatusOr<std::unique_ptr<SparseStep>> NewStep(int32_t max_seqs, int32_t max_step_tokens);

  // Begins a step of one or more micro-batches, each then planned once: they share the step's
  // stamp, so that no micro-batch's recall evicts a block another one picked in the same layer
  // of the step, and the device tier's slots, which must hold all their offloaded picks.
  // ResourceExhausted after 2^31 steps.
  absl::Status BeginStep();
  // Plans a micro-batch of `sequences` in the step begun last and uploads what its layers read;
  // its rows count into `counters` (backend memory, [sequences][kSparseCounters] int64, zeroed by
  // the caller and read back with its tokens). InvalidArgument for a selection the model cannot
  // take, an offloaded sequence without tiers or in another mode, sparse rows of two modes in
  // one step, or more sequences or tokens than NewStep's limits; FailedPrecondition for a sink or
  // window block (or a candidate of a sequence that is not offloaded) that is not resident;
  // ResourceExhausted when the step's offloaded picks exceed the device tier's slots. Nothing is
  // enqueued on failure.
  absl::Status Plan(std::span<const SparseSequence> sequences, int64_t* counters, SparseStep& step);
  // Whether the planned step has a row that attends sparsely (else attention is all dense).
  bool Attends(const SparseStep& step) const;
  // Whether the step's sparse rows attend densely in `layer` (OffloadConfig::dense_layers).
  bool DenseLayer(int32_t layer) const { return layer < config_.dense_layers; }
  // After the layer's KV append: the summaries of the blocks the step filled, and the
  // write-back of the offloaded ones.
  absl::Status AfterAppend(int32_t layer, SparseStep& step);
  // The layer's selection for the whole step, from its `q` rows (stride q_stride): every
  // candidate scored, each row's picks and block tables, and the recall of the offloaded misses
  // enqueued on the copy engine. Compute does not wait for that recall until Attend: a scheduler
  // may run other work between the two.
  absl::Status Select(int32_t layer, SparseStep& step, const float* q, int64_t q_stride);
  // The layer's attention for the whole step, after its Select: compute waits (on the device)
  // for the layer's recall, then attends; `out` rows of out_row_bytes; dense rows read `dense`,
  // the step's paged tables.
  absl::Status Attend(int32_t layer, SparseStep& step, const float* q, int64_t q_stride,
                      float scale, void* out, int64_t out_row_bytes, const PagedKvBatch& dense);
  // After the last layer: compute waits (on the device) for the step's write-backs.
  absl::Status FinishStep(SparseStep& step);
  // Once the step's counters are on the host (`counters`, as Plan's): adds them to the
  // statistics. Internal, after clearing the directory, when the step's misses overflowed the
  // device tier (its attention read the wrong blocks).
  absl::Status Collect(SparseStep& step, std::span<const int64_t> counters);
  // A step that failed after Plan: waits for its copies and clears the directory (misses may
  // have been given slots that were never filled).
  void Abandon(SparseStep& step);

  // Drops a finished sequence's statistics (its host blocks' slots go with FreeSlots, once their
  // last holder lets them go).
  void Forget(uint64_t key);
  // Frees the device slots that hold any of `host_blocks`, in every layer and set. Between steps.
  absl::Status FreeSlots(std::span<const int32_t> host_blocks);

  // The link's rate host -> device in bytes a second: one copy of `bytes` from pinned host memory
  // into device memory, timed on the copy stream. Waits for it (at engine start, not in a step).
  // FailedPrecondition without tiers; ResourceExhausted when the memory cannot be had.
  absl::StatusOr<double> CalibrateLink(int64_t bytes);

  // Moving a running sequence between the tiers, between steps; compute waits (on the device) for
  // the copies, so the blocks copied from may be reused once these return. FailedPrecondition
  // without tiers, InvalidArgument for lists of unequal lengths or blocks out of range.
  // MoveToHost (a resident sequence offloaded): in every layer, summarizes device block
  // device_blocks[i] as host block host_blocks[i] and writes it back there.
  absl::Status MoveToHost(std::span<const int32_t> device_blocks,
                          std::span<const int32_t> host_blocks);
  // MoveToDevice (an offloaded sequence made resident): in every layer, copies host block
  // host_blocks[i] into device block device_blocks[i].
  absl::Status MoveToDevice(std::span<const int32_t> host_blocks,
                            std::span<const int32_t> device_blocks);

  // The host tier (null without tiers): the scheduler grows it as it admits.
  HostTier* host_tier() { return tiers_ ? &tiers_->host : nullptr; }
  const HostTier* host_tier() const { return tiers_ ? &tiers_->host : nullptr; }
  // Prompt chunks of offloaded sequences prefilled staged (null without tiers).
  StagedPrefill* staged() { return staged_.get(); }
  const OffloadConfig& config() const { return config_; }
  int32_t num_slots() const { return tiers_ ? tiers_->directory.num_slots() : 0; }
  // Bytes of a block of one layer as the host tier stores it (the device's without one).
  int64_t host_block_bytes() const {
    return tiers_ ? tiers_->host.block_bytes() : layout_.block_bytes();
  }
  int32_t first_slot() const { return dense_blocks_; }
  int32_t host_blocks() const { return tiers_ ? tiers_->host.max_blocks() : 0; }

  const SparseAttentionStats& stats() const { return stats_; }
  SparseAttentionStats stats(uint64_t key) const;
  OffloadStats offload_stats() const;

 private:
  struct Tiers {
    HostTier host;
    SlotDirectory directory;
  };

  SparseAttention(Backend& backend, std::vector<void*> layers, const PagedKvLayout& layout,
                  int32_t dense_blocks, const OffloadConfig& config, const SparseLimits& limits,
                  BlockSummaries summaries, std::optional<Tiers> tiers);
  // Enqueues the layer's recall (compute does not wait for it).
  absl::Status Recall(int32_t layer, SparseStep& step);
  // The baseline executors: the recall list to the host, then DMA planned there.
  absl::Status RecallPlannedOnHost(int32_t layer, SparseStep& step);
  // Checks a move's lists (MoveToHost, MoveToDevice).
  absl::Status CheckMove(std::span<const int32_t> device_blocks,
                         std::span<const int32_t> host_blocks) const;

  // The lists Plan builds a step's plan in before staging it, kept from step to step so that a
  // steady decode step allocates none of them.
  struct PlanLists {
    std::vector<int32_t> summary_ids;
    std::vector<int32_t> query_rows;
    std::vector<int32_t> candidate_blocks;
    std::vector<int32_t> fixed;
    std::vector<ScoreSegment> segments;
    std::vector<SparseTableRow> rows;
    std::vector<int32_t> filled_blocks;
    std::vector<int32_t> filled_summaries;
    std::vector<WriteBackEntry> writebacks;
    std::vector<WriteBackEntry> departed;
    std::vector<SparseAttentionStats> row_stats;
    void Clear();
  };

  Backend& backend_;
  const std::vector<void*> layers_;  // the cache's memory, a layer each
  const PagedKvLayout layout_;
  const int32_t dense_blocks_;
  const OffloadConfig config_;
  const SparseLimits limits_;
  BlockSummaries summaries_;
  std::optional<Tiers> tiers_;
  std::unique_ptr<StagedPrefill> staged_;  // with tiers
  int32_t step_stamp_ = 0;                 // the step's stamp (BuildSparseTables)
  int32_t step_picks_ = 0;  // offloaded picks the step's micro-batches planned so far
  // The mode of the step's sparse rows (none until one is planned).
  std::optional<SelectionMode> step_mode_;
  SparseAttentionStats stats_;
  absl::flat_hash_map<uint64_t, SparseAttentionStats> key_stats_;
  OffloadStats offload_stats_;
  PlanLists plan_lists_;
  DeviceBuffer move_lists_;               // MoveToHost's uploaded lists, grown as needed
  DeviceBuffer slot_layers_;              // SlotLayer [layers], for AdoptFreeSlots
  std::unique_ptr<CopyEvent> move_done_;  // the end of the last move's copies
};

}  // namespace pulse
