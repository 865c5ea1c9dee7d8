// Sparse decode attention (DESIGN.md, "one decode step as data"): for every sequence of a step
// that has a SparseSelection and one new token, each layer's query attends only to the blocks the
// selector picks - the attention-sink blocks, the recent window, and the full blocks whose Quest
// summaries bound q.k highest, within a token budget. Summaries are kept per layer for every
// block of the KvCache and every block of the host tier, written when the step that fills a block
// runs. Sequences without a selection, and prompt chunks, attend to every block as before; with a
// budget that covers the context the selection is every block, so the result is the dense one bit
// for bit.
//
// An offloaded sequence's picked blocks that are not resident in the dense pool are resolved
// through OffloadedKv (recalled into device slots when they miss), and its filled blocks are
// written back to the host tier.
//
// Scoring runs on the backend: one ScoreBlocks a layer bounds every candidate of every sparse
// row for every query head, one AggregateScores turns those into each row's scores, and one small
// device-to-host copy brings the scores back; the host picks the best blocks from them. Not
// thread-safe; the ModelRunner's step serializes it.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/backend/backend.h"
#include "core/base/status.h"
#include "core/kv/block_selector.h"
#include "core/model/offloaded_kv.h"
#include "core/model/step_batch.h"

namespace pulse {

// Totals over every (sparse sequence, layer, step) selection since the runner was created.
struct SparseAttentionStats {
  int64_t selections = 0;        // (sequence, layer, set) selections made
  int64_t candidate_blocks = 0;  // blocks scored
  int64_t picked_blocks = 0;     // candidates selected
  int64_t reused_blocks = 0;     // picked blocks the same set picked the step before
  int64_t attended_tokens = 0;   // tokens the sparse rows attended to
  int64_t context_tokens = 0;    // tokens they would have attended to densely
  // Host time selecting blocks once a layer's scores are on the host: ranking each row's
  // candidates, looking them up in the block cache, queuing their recall. The device waits for
  // it. Runner totals only (0 for a sequence).
  double selection_seconds = 0;
};

class SparseAttention {
 public:
  // Scratch for `num_layers` layers of caches of `num_blocks` blocks of `layout`, steps of up to
  // `max_seqs` sequences with block tables of up to `max_blocks_per_seq`, and `num_heads` query
  // heads, summarizing blocks at `summary_radius` (Backend::SummarizeBlocks). `offloaded` (may be
  // null: no sequence may be offloaded) must outlive this object.
  static absl::StatusOr<std::unique_ptr<SparseAttention>> Create(
      Backend& backend, const PagedKvLayout& layout, int32_t num_layers, int32_t num_blocks,
      int32_t num_heads, int32_t max_seqs, int32_t max_blocks_per_seq, float summary_radius,
      OffloadedKv* offloaded);

  // Takes note of the blocks this step fills (of sparse sequences), whose summaries Summarize
  // then writes in every layer. InvalidArgument for an offloaded sequence whose selection does
  // not fit the offloaded KV (none, or another mode).
  absl::Status Prepare(const StepBatch& batch);
  // After the layer's KV append: the summaries of the blocks the step filled, and the write-back
  // of the offloaded ones.
  absl::Status Summarize(int32_t layer, const void* layer_blocks);
  // Whether the step has a row that attends sparsely.
  bool Applies(const StepBatch& batch) const;
  // The layer's attention for the whole step: `q` rows as the batch describes (stride
  // q_stride), `out` rows of out_row_bytes. InvalidArgument from the selector for options that
  // do not fit the model, FailedPrecondition for a block the selection always includes that is
  // not resident, ResourceExhausted when the device tier cannot hold the step's selection.
  absl::Status Attend(int32_t layer, const StepBatch& batch, void* layer_blocks, const float* q,
                      int64_t q_stride, float scale, void* out, int64_t out_row_bytes);

  const SparseAttentionStats& stats() const { return stats_; }
  // The totals of sequence `key` alone (zeros for a key never seen or forgotten).
  SparseAttentionStats stats(uint64_t key) const;
  // Drops what is kept of sequence `key` (its previous selections and totals).
  void Forget(uint64_t key);

 private:
  // One Attention call: consecutive sequences [first_seq, end_seq) whose tables are laid out
  // with the same table_heads.
  struct Run {
    int32_t first_seq = 0;
    int32_t end_seq = 0;
    int32_t table_heads = 1;
    int32_t max_kv_len = 0;
    int32_t max_q_len = 0;
    int32_t max_blocks = 1;  // the longest table, the stride of the run's tables
    size_t tables = 0;       // offsets into the staged inputs: [seqs][table_heads][max blocks]
    size_t kv_lens = 0;
    size_t q_offsets = 0;
  };

  // One sparse decode row's selection in the current layer.
  struct RowSelection {
    BlockSelector selector;  // for the row's sequence's options
    int32_t seq = 0;
    int32_t first_score = 0;  // where its scores ([sets][candidates]) start in host_scores_
    BlockPartition partition = {};
  };

  SparseAttention(Backend& backend, const PagedKvLayout& layout, int32_t num_blocks,
                  int32_t num_heads, size_t max_candidates, float summary_radius,
                  std::vector<DeviceBuffer> summaries, DeviceBuffer score_inputs,
                  DeviceBuffer bounds, DeviceBuffer inputs, DeviceBuffer filled,
                  OffloadedKv* offloaded);
  // The summary of logical block `logical` of a sequence with device blocks `blocks` and host
  // blocks `host_blocks` (empty unless it is offloaded): its device block's, or its host block's
  // after the device blocks when the sequence is offloaded.
  int32_t SummaryId(std::span<const int32_t> blocks, std::span<const int32_t> host_blocks,
                    int32_t logical) const;
  // Scores the candidates of every sparse decode row of the step in one call; `rows` gets them.
  absl::Status Score(int32_t layer, const StepBatch& batch, const float* q, int64_t q_stride,
                     std::vector<RowSelection>& rows);
  // The blocks `row` attends to in `layer`: one list (or one a KV head when the sequence is
  // head-wise) of device blocks, and the tokens they hold.
  absl::Status Select(int32_t layer, const StepBatch& batch, const RowSelection& row,
                      std::vector<std::vector<int32_t>>& tables, int32_t& kv_len);

  Backend& backend_;
  const PagedKvLayout layout_;
  const int32_t num_blocks_;
  const int32_t num_heads_;
  const size_t max_candidates_;  // blocks one step may score: max seqs x max blocks a sequence
  const float summary_radius_;
  // A layer: [num_blocks + host blocks][summary elements] fp32.
  std::vector<DeviceBuffer> summaries_;
  // int32 [2][max candidates]: summary ids, then query rows; then [max seqs] ScoreSegment.
  DeviceBuffer score_inputs_;
  DeviceBuffer bounds_;  // [num_heads][max candidates] bounds, then [kv heads][max] scores
  DeviceBuffer inputs_;  // int32: the runs' tables, lengths and offsets
  DeviceBuffer filled_;  // int32 [2][max filled]: blocks the step fills, their summary ids
  OffloadedKv* const offloaded_;
  int32_t filled_count_ = 0;
  std::vector<BlockWriteBack> writebacks_;  // the filled blocks of offloaded sequences
  std::vector<int32_t> staging_;
  std::vector<float> host_scores_;  // the layer's scores, each sparse row's [sets][candidates]
  // (key, layer * sets + set) -> the blocks picked the step before, sorted.
  absl::flat_hash_map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> previous_;
  SparseAttentionStats stats_;
  absl::flat_hash_map<uint64_t, SparseAttentionStats> key_stats_;
};

}  // namespace pulse
