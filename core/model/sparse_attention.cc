#include "core/model/sparse_attention.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "core/backend/reference/block_summary.h"
#include "core/kv/block_selector.h"

namespace pulse {

absl::StatusOr<std::unique_ptr<SparseAttention>> SparseAttention::Create(
    Backend& backend, const PagedKvLayout& layout, int32_t num_layers, int32_t num_blocks,
    int32_t num_heads, int32_t max_seqs, int32_t max_blocks_per_seq, float summary_radius,
    OffloadedKv* offloaded) {
  PULSE_RETURN_IF_ERROR(reference::CheckSummaryRadius(summary_radius));
  const int64_t summary_elems = reference::BlockSummaryElems(layout);
  const int64_t host_blocks = offloaded == nullptr ? 0 : offloaded->options().host_blocks;
  std::vector<DeviceBuffer> summaries;
  for (int32_t layer = 0; layer < num_layers; ++layer) {
    PULSE_ASSIGN_OR_RETURN(
        DeviceBuffer buffer,
        backend.Allocate(static_cast<size_t>((num_blocks + host_blocks) * summary_elems) *
                         sizeof(float)));
    summaries.push_back(std::move(buffer));
  }
  const auto blocks = static_cast<size_t>(int64_t{max_seqs} * max_blocks_per_seq);
  const int64_t input_ints = int64_t{max_seqs} * layout.num_kv_heads * (max_blocks_per_seq + 1) +
                             2 * int64_t{max_seqs} + 2;
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer score_inputs,
                         backend.Allocate(2 * blocks * sizeof(int32_t) +
                                          static_cast<size_t>(max_seqs) * sizeof(ScoreSegment)));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer bounds,
                         backend.Allocate(static_cast<size_t>(num_heads + layout.num_kv_heads) *
                                          blocks * sizeof(float)));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer inputs, backend.Allocate(input_ints * sizeof(int32_t)));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer filled, backend.Allocate(2 * blocks * sizeof(int32_t)));
  return std::unique_ptr<SparseAttention>(new SparseAttention(
      backend, layout, num_blocks, num_heads, blocks, summary_radius, std::move(summaries),
      std::move(score_inputs), std::move(bounds), std::move(inputs), std::move(filled), offloaded));
}

SparseAttention::SparseAttention(Backend& backend, const PagedKvLayout& layout, int32_t num_blocks,
                                 int32_t num_heads, size_t max_candidates, float summary_radius,
                                 std::vector<DeviceBuffer> summaries, DeviceBuffer score_inputs,
                                 DeviceBuffer bounds, DeviceBuffer inputs, DeviceBuffer filled,
                                 OffloadedKv* offloaded)
    : backend_(backend),
      layout_(layout),
      num_blocks_(num_blocks),
      num_heads_(num_heads),
      max_candidates_(max_candidates),
      summary_radius_(summary_radius),
      summaries_(std::move(summaries)),
      score_inputs_(std::move(score_inputs)),
      bounds_(std::move(bounds)),
      inputs_(std::move(inputs)),
      filled_(std::move(filled)),
      offloaded_(offloaded) {}

int32_t SparseAttention::SummaryId(std::span<const int32_t> blocks,
                                   std::span<const int32_t> host_blocks, int32_t logical) const {
  const auto index = static_cast<size_t>(logical);
  return host_blocks.empty() ? blocks[index] : num_blocks_ + host_blocks[index];
}

absl::Status SparseAttention::Prepare(const StepBatch& batch) {
  staging_.clear();
  writebacks_.clear();
  std::vector<int32_t> summary_ids;
  const int32_t block_tokens = layout_.block_tokens;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    if (!batch.sparse(s)) continue;
    if (batch.offloaded(s) &&
        (offloaded_ == nullptr || batch.sparse(s)->options.mode != offloaded_->options().mode)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sequence %d is offloaded, but the runner %s", s,
          offloaded_ == nullptr ? "has no host tier" : "offloads in the other selection mode"));
    }
    const int32_t kv_len = batch.kv_lens()[s];
    const int32_t q_len = batch.q_offsets()[s + 1] - batch.q_offsets()[s];
    const std::span<const int32_t> blocks = batch.blocks(s);
    const std::span<const int32_t> host_blocks = batch.host_blocks(s);
    for (int32_t position = kv_len - q_len; position < kv_len; ++position) {
      if ((position + 1) % block_tokens != 0) continue;
      const int32_t logical = position / block_tokens;
      const int32_t device = blocks[static_cast<size_t>(logical)];
      staging_.push_back(device);
      summary_ids.push_back(SummaryId(blocks, host_blocks, logical));
      if (!host_blocks.empty()) {
        writebacks_.push_back({device, host_blocks[static_cast<size_t>(logical)]});
      }
    }
  }
  filled_count_ = static_cast<int32_t>(staging_.size());
  if (filled_count_ > 0) {
    staging_.insert(staging_.end(), summary_ids.begin(), summary_ids.end());
    backend_.CopyToDevice(filled_.data(), staging_.data(), staging_.size() * sizeof(int32_t));
  }
  return absl::OkStatus();
}

absl::Status SparseAttention::Summarize(int32_t layer, const void* layer_blocks) {
  if (filled_count_ == 0) return absl::OkStatus();
  const int32_t* filled = filled_.as<int32_t>();
  backend_.SummarizeBlocks(layer_blocks, layout_, filled, filled + filled_count_, filled_count_,
                           summary_radius_, summaries_[static_cast<size_t>(layer)].as<float>());
  if (writebacks_.empty()) return absl::OkStatus();
  return offloaded_->WriteBack(layer, writebacks_);
}

bool SparseAttention::Applies(const StepBatch& batch) const {
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    if (batch.sparse(s) && batch.q_offsets()[s + 1] - batch.q_offsets()[s] == 1) return true;
  }
  return false;
}

absl::Status SparseAttention::Score(int32_t layer, const StepBatch& batch, const float* q,
                                    int64_t q_stride, std::vector<RowSelection>& rows) {
  rows.clear();
  staging_.clear();
  std::vector<int32_t> query_rows;
  std::vector<ScoreSegment> segments;
  int32_t num_scores = 0;
  int32_t max_sets = 1;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t first_row = batch.q_offsets()[s];
    if (!batch.sparse(s) || batch.q_offsets()[s + 1] - first_row != 1) continue;
    PULSE_ASSIGN_OR_RETURN(const BlockSelector selector,
                           BlockSelector::Create(layout_, num_heads_, batch.sparse(s)->options));
    RowSelection row{.selector = selector, .seq = s, .first_score = num_scores};
    PULSE_ASSIGN_OR_RETURN(row.partition, selector.Partition(batch.kv_lens()[s]));
    const auto first_candidate = static_cast<int32_t>(staging_.size());
    const std::span<const int32_t> blocks = batch.blocks(s);
    const std::span<const int32_t> host_blocks = batch.host_blocks(s);
    for (int32_t logical = row.partition.sink_end; logical < row.partition.window_begin;
         ++logical) {
      staging_.push_back(SummaryId(blocks, host_blocks, logical));
      query_rows.push_back(first_row);
    }
    const int32_t count = row.partition.num_candidates();
    segments.push_back(selector.Segment(first_candidate, count, num_scores));
    num_scores += selector.num_sets() * count;
    max_sets = std::max(max_sets, selector.num_sets());
    rows.push_back(row);
  }
  const auto count = static_cast<int32_t>(staging_.size());
  host_scores_.resize(static_cast<size_t>(num_scores));
  if (count == 0) return absl::OkStatus();
  int32_t* ids = score_inputs_.as<int32_t>();
  auto* device_segments = reinterpret_cast<ScoreSegment*>(ids + 2 * max_candidates_);
  backend_.CopyToDevice(ids, staging_.data(), staging_.size() * sizeof(int32_t));
  backend_.CopyToDevice(ids + count, query_rows.data(), query_rows.size() * sizeof(int32_t));
  backend_.CopyToDevice(device_segments, segments.data(), segments.size() * sizeof(ScoreSegment));
  float* bounds = bounds_.as<float>();
  float* scores = bounds + static_cast<size_t>(num_heads_) * max_candidates_;
  backend_.ScoreBlocks(q, q_stride, num_heads_, layout_,
                       summaries_[static_cast<size_t>(layer)].as<float>(), ids, ids + count, count,
                       bounds);
  backend_.AggregateScores(bounds, num_heads_, count, device_segments,
                           static_cast<int32_t>(segments.size()), max_sets, scores);
  return backend_.CopyToHost(host_scores_.data(), scores, host_scores_.size() * sizeof(float));
}

absl::Status SparseAttention::Select(int32_t layer, const StepBatch& batch, const RowSelection& row,
                                     std::vector<std::vector<int32_t>>& tables, int32_t& kv_len) {
  const int32_t seq = row.seq;
  const SparseSelection& sparse = *batch.sparse(seq);
  const BlockSelector& selector = row.selector;
  const BlockPartition& partition = row.partition;
  const auto count = static_cast<size_t>(partition.num_candidates());
  const auto first = host_scores_.begin() + row.first_score;
  std::vector<float> scores(
      first, first + static_cast<std::ptrdiff_t>(static_cast<size_t>(selector.num_sets()) * count));
  const int32_t num_tokens = batch.kv_lens()[seq];
  PULSE_ASSIGN_OR_RETURN(const BlockSelection selection,
                         selector.SelectScored(num_tokens, std::move(scores)));

  const std::span<const int32_t> blocks = batch.blocks(seq);
  const std::span<const int32_t> host_blocks = batch.host_blocks(seq);
  SparseAttentionStats step;
  tables.assign(static_cast<size_t>(selection.num_sets), {});
  for (int32_t k = 0; k < selection.num_sets; ++k) {
    std::vector<int32_t> picked;
    for (const int32_t logical : selection.set(k)) {
      int32_t device = blocks[static_cast<size_t>(logical)];
      const bool candidate = logical >= partition.sink_end && logical < partition.window_begin;
      if (candidate) {
        picked.push_back(SummaryId(blocks, host_blocks, logical));
        if (device < 0) {
          const float score = selection.scores[static_cast<size_t>(k) * count +
                                               static_cast<size_t>(logical - partition.sink_end)];
          PULSE_ASSIGN_OR_RETURN(
              device, offloaded_->Resolve(layer, k, host_blocks[static_cast<size_t>(logical)],
                                          sparse.key, score));
        }
      } else if (device < 0) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "block %d of sequence %d is a sink or window block, but it is not resident", logical,
            seq));
      }
      tables[static_cast<size_t>(k)].push_back(device);
    }
    std::sort(picked.begin(), picked.end());
    std::vector<int32_t>& before = previous_[{sparse.key, layer * selection.num_sets + k}];
    for (const int32_t block : picked) {
      step.reused_blocks += std::binary_search(before.begin(), before.end(), block) ? 1 : 0;
    }
    step.picked_blocks += static_cast<int64_t>(picked.size());
    before = std::move(picked);
  }
  step.selections = selection.num_sets;
  step.candidate_blocks = static_cast<int64_t>(count) * selection.num_sets;
  step.attended_tokens = partition.selected_tokens;
  step.context_tokens = num_tokens;
  for (SparseAttentionStats* totals : {&stats_, &key_stats_[sparse.key]}) {
    totals->selections += step.selections;
    totals->candidate_blocks += step.candidate_blocks;
    totals->picked_blocks += step.picked_blocks;
    totals->reused_blocks += step.reused_blocks;
    totals->attended_tokens += step.attended_tokens;
    totals->context_tokens += step.context_tokens;
  }
  kv_len = partition.selected_tokens;
  return absl::OkStatus();
}

absl::Status SparseAttention::Attend(int32_t layer, const StepBatch& batch, void* layer_blocks,
                                     const float* q, int64_t q_stride, float scale, void* out,
                                     int64_t out_row_bytes) {
  const int32_t num_seqs = batch.num_seqs();
  std::vector<std::vector<std::vector<int32_t>>> tables(static_cast<size_t>(num_seqs));
  std::vector<int32_t> lengths(static_cast<size_t>(num_seqs));
  std::vector<RowSelection> rows;
  PULSE_RETURN_IF_ERROR(Score(layer, batch, q, q_stride, rows));
  const auto scored = std::chrono::steady_clock::now();
  std::vector<bool> sparse_row(static_cast<size_t>(num_seqs), false);
  bool recalls = false;
  for (const RowSelection& row : rows) {
    const auto s = static_cast<size_t>(row.seq);
    PULSE_RETURN_IF_ERROR(Select(layer, batch, row, tables[s], lengths[s]));
    sparse_row[s] = true;
    if (batch.offloaded(row.seq)) {
      recalls = true;
      // The misses so far start copying while the next rows select.
      PULSE_RETURN_IF_ERROR(offloaded_->RecallQueued(layer));
    }
  }
  stats_.selection_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - scored).count();
  if (recalls) PULSE_RETURN_IF_ERROR(offloaded_->Recall(layer));
  for (int32_t s = 0; s < num_seqs; ++s) {
    if (sparse_row[static_cast<size_t>(s)]) continue;
    const std::span<const int32_t> blocks = batch.blocks(s);
    tables[s] = {std::vector<int32_t>(blocks.begin(), blocks.end())};
    lengths[s] = batch.kv_lens()[s];
  }

  // Runs of consecutive sequences with one table a sequence, or one a KV head (head-wise).
  std::vector<Run> runs;
  staging_.clear();
  for (int32_t s = 0; s < num_seqs;) {
    Run run;
    run.first_seq = s;
    run.table_heads = static_cast<int32_t>(tables[s].size());
    int32_t end = s;
    while (end < num_seqs && static_cast<int32_t>(tables[end].size()) == run.table_heads) {
      for (const std::vector<int32_t>& table : tables[end]) {
        run.max_blocks = std::max(run.max_blocks, static_cast<int32_t>(table.size()));
      }
      run.max_kv_len = std::max(run.max_kv_len, lengths[end]);
      run.max_q_len = std::max(run.max_q_len, batch.q_offsets()[end + 1] - batch.q_offsets()[end]);
      ++end;
    }
    run.end_seq = end;
    run.tables = staging_.size();
    for (int32_t t = s; t < end; ++t) {
      for (const std::vector<int32_t>& table : tables[t]) {
        staging_.insert(staging_.end(), table.begin(), table.end());
        staging_.resize(staging_.size() + static_cast<size_t>(run.max_blocks) - table.size(), -1);
      }
    }
    run.kv_lens = staging_.size();
    for (int32_t t = s; t < end; ++t)
      staging_.resize(staging_.size() + run.table_heads, lengths[t]);
    run.q_offsets = staging_.size();
    for (int32_t t = s; t <= end; ++t) {
      staging_.push_back(batch.q_offsets()[t] - batch.q_offsets()[s]);
    }
    runs.push_back(run);
    s = end;
  }
  backend_.CopyToDevice(inputs_.data(), staging_.data(), staging_.size() * sizeof(int32_t));

  const int32_t* inputs = inputs_.as<int32_t>();
  for (const Run& run : runs) {
    const int32_t first_row = batch.q_offsets()[run.first_seq];
    PagedKvBatch kv;
    kv.blocks = layer_blocks;
    kv.layout = layout_;
    kv.num_seqs = run.end_seq - run.first_seq;
    kv.max_blocks_per_seq = run.max_blocks;
    kv.block_tables = inputs + run.tables;
    kv.kv_lens = inputs + run.kv_lens;
    kv.q_offsets = inputs + run.q_offsets;
    kv.num_rows = batch.q_offsets()[run.end_seq] - first_row;
    kv.max_q_len = run.max_q_len;
    kv.max_kv_len = run.max_kv_len;
    kv.table_heads = run.table_heads;
    backend_.Attention(q + first_row * q_stride, q_stride, num_heads_, kv, scale,
                       static_cast<char*>(out) + first_row * out_row_bytes);
  }
  return absl::OkStatus();
}

SparseAttentionStats SparseAttention::stats(uint64_t key) const {
  const auto it = key_stats_.find(key);
  return it == key_stats_.end() ? SparseAttentionStats{} : it->second;
}

void SparseAttention::Forget(uint64_t key) {
  absl::erase_if(previous_, [key](const auto& entry) { return entry.first.first == key; });
  key_stats_.erase(key);
}

}  // namespace pulse
