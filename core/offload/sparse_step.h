// One micro-batch's sparse step (SparseAttention::NewStep): the plan its layers read, uploaded
// once a step, the buffers they write (bounds, scores, picks, block tables, the recall list) and
// the copy events of each layer. Owned by the model runner's step context; only SparseAttention
// reads or writes it. Several of them let a scheduler run micro-batches of one step interleaved.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend/backend.h"

namespace pulse {

class SparseStep {
 public:
  SparseStep(const SparseStep&) = delete;
  SparseStep& operator=(const SparseStep&) = delete;

  // What a graph of the planned step bakes in besides its buffers' addresses: two steps of equal
  // shapes launch the same ops over the same plan layout (their data may differ). Appended to
  // `shape`: the padded plan's sizes, then each run of rows (which rows attend densely, which
  // through the sparse tables).
  void AppendShape(std::vector<int64_t>& shape) const {
    shape.insert(shape.end(), {static_cast<int64_t>(staging.size()), num_candidates, num_rows,
                               num_sets, table_stride, max_kv_len, num_filled, num_writebacks,
                               offloaded ? 1 : 0, static_cast<int64_t>(runs.size())});
    for (const Run& run : runs) {
      shape.insert(shape.end(),
                   {run.first_seq, run.end_seq, run.first_row, run.num_rows, run.max_q_len,
                    run.sparse ? 1 : 0, run.first_sparse_row, static_cast<int64_t>(run.q_offsets)});
    }
  }

 private:
  friend class SparseAttention;

  // Consecutive sequences of one kind: sparse decode rows (their tables built per layer), or
  // dense ones (the step's own tables). `q_offsets` points into the uploaded plan.
  struct Run {
    int32_t first_seq = 0;
    int32_t end_seq = 0;
    int32_t first_row = 0;
    int32_t num_rows = 0;
    int32_t max_q_len = 0;
    bool sparse = false;
    int32_t first_sparse_row = 0;  // sparse runs: its first row of the tables
    size_t q_offsets = 0;          // in the plan: [seqs + 1], relative to first_row
  };
  struct LayerEvents {
    std::unique_ptr<CopyEvent> recall_start;
    std::unique_ptr<CopyEvent> recall_end;
    std::unique_ptr<CopyEvent> writeback_start;
    std::unique_ptr<CopyEvent> writeback;
    bool recalled = false;    // this step
    bool wrote_back = false;  // this step
  };

  SparseStep() = default;

  // Where each part of the plan sits in `plan` (ints), for this step.
  struct Offsets {
    size_t summary_ids = 0;  // [candidates]
    size_t query_rows = 0;   // [candidates]
    size_t candidate_blocks = 0;
    size_t fixed = 0;
    size_t segments = 0;  // ScoreSegment [rows], 8 ints each
    size_t rows = 0;      // SparseTableRow [rows], 8 ints each
    size_t filled_blocks = 0;
    size_t filled_summaries = 0;
    size_t writebacks = 0;  // WriteBackEntry [writebacks], 2 ints each
    size_t stamp = 0;       // [1]
  };

  const int32_t* plan_ints() const { return plan.as<const int32_t>(); }

  // Sized once by NewStep.
  int32_t max_seqs = 0;
  int32_t max_step_tokens = 0;
  DeviceBuffer plan;                // int32: the step's uploaded plan (Offsets)
  DeviceBuffer bounds;              // [num_heads][max candidates], every rank's heads
  DeviceBuffer rank_bounds;         // the rank's heads' part of bounds, before it is gathered
  DeviceBuffer scores;              // [max sets][max candidates]
  DeviceBuffer picked;              // [max sets][max candidates]
  DeviceBuffer tables;              // [max seqs][max sets][max blocks a sequence]
  DeviceBuffer kv_lens;             // [max seqs][max sets]
  DeviceBuffer recalls;             // int32 counts [max sets], then RecallEntry [max sets][slots]
  DeviceBuffer departed;            // WriteBackEntry [max seqs * max blocks a sequence]
  int64_t* counters = nullptr;      // [seqs][kSparseCounters] (the caller's, given to Plan)
  std::vector<LayerEvents> events;  // [layers]

  // This step's plan, on the host.
  std::vector<int32_t> staging;
  Offsets at;
  std::vector<Run> runs;
  std::vector<uint64_t> row_keys;  // the sparse rows' sequences
  int32_t num_candidates = 0;
  int32_t num_rows = 0;  // sparse decode rows
  int32_t num_sets = 1;
  // SoloHead over the query heads of several ranks (SparseLimits::ranks): bounds are gathered.
  bool gathers_bounds = false;
  int32_t table_stride = 1;
  int32_t max_kv_len = 0;  // of the sparse rows' tables
  int32_t num_filled = 0;
  int32_t num_writebacks = 0;
  bool offloaded = false;  // some sparse row resolves through the directory
  bool tables_built = false;
};

}  // namespace pulse
