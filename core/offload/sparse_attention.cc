#include "core/offload/sparse_attention.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/kv/block_table.h"
#include "core/offload/sparse_step.h"

namespace pulse {
namespace {

constexpr int32_t kIntsPerSegment = sizeof(ScoreSegment) / sizeof(int32_t);
constexpr int32_t kIntsPerRow = sizeof(SparseTableRow) / sizeof(int32_t);
constexpr int32_t kIntsPerWriteBack = sizeof(WriteBackEntry) / sizeof(int32_t);
// A decode step's plan is padded so that its shape, which a graph of the step bakes in, changes
// seldom as sequences grow: candidates to this many (a row gains one every block_tokens steps),
// fixed blocks to this many, table rows to this many blocks and the sparse tables' longest
// length to this many tokens. The padding is never read as data.
constexpr int32_t kCandidateGranule = 256;
constexpr int32_t kFixedGranule = 64;
constexpr int32_t kTableGranule = 8;
constexpr int32_t kKvLenGranule = 256;

int64_t RoundUp(int64_t value, int64_t granule) {
  return (value + granule - 1) / granule * granule;
}

// Appends `values` to the staged plan; returns where they start.
template <typename T>
size_t Stage(std::vector<int32_t>& staging, std::span<const T> values) {
  static_assert(sizeof(T) % sizeof(int32_t) == 0 && std::is_trivially_copyable_v<T>);
  const size_t offset = staging.size();
  staging.resize(offset + values.size_bytes() / sizeof(int32_t));
  if (!values.empty()) std::memcpy(staging.data() + offset, values.data(), values.size_bytes());
  return offset;
}

void Add(SparseAttentionStats& total, const SparseAttentionStats& more) {
  total.selections += more.selections;
  total.candidate_blocks += more.candidate_blocks;
  total.picked_blocks += more.picked_blocks;
  total.reused_blocks += more.reused_blocks;
  total.attended_tokens += more.attended_tokens;
  total.context_tokens += more.context_tokens;
  total.recall_bytes += more.recall_bytes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SparseAttention>> SparseAttention::Create(
    Backend& backend, const KvCache& cache, int32_t dense_blocks, const OffloadConfig& config,
    const SparseLimits& limits) {
  PULSE_RETURN_IF_ERROR(config.Validate());
  const PagedKvLayout& layout = cache.layout();
  const int32_t sets = SelectionSets(config.selection.mode, layout);
  const bool tiered = config.host_tokens > 0 && config.slot_tokens > 0;
  if (tiered && config.dense_layers > 0) {
    return absl::UnimplementedError(
        "dense layers with a host tier: offloaded requests would keep those layers resident");
  }
  const int32_t host_blocks =
      tiered ? BlocksForTokens(static_cast<int32_t>(config.host_tokens), layout.block_tokens) : 0;
  const int32_t slots =
      tiered ? BlocksForTokens(static_cast<int32_t>(config.slot_tokens), layout.block_tokens) : 0;
  if (limits.max_seqs < 1 || limits.max_blocks_per_seq < 1 || limits.max_step_tokens < 1 ||
      limits.num_heads < 1 || dense_blocks < 1 ||
      int64_t{dense_blocks} + slots > cache.num_blocks()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sparse attention over %d dense blocks and %d slots of a cache of %d blocks", dense_blocks,
        slots, cache.num_blocks()));
  }
  const int64_t fragment_bytes =
      layout.head_elems() * static_cast<int64_t>(DTypeBytes(layout.type));
  if (tiered && sets > 1 && fragment_bytes % static_cast<int64_t>(kCopyAlignment) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "head-wise offloading moves a head's keys of a block (%d bytes), which must be a multiple "
        "of %d bytes",
        fragment_bytes, kCopyAlignment));
  }
  // With a host tier only offloaded sequences attend sparsely, and their candidates are host-tier
  // blocks: only those keep summaries.
  PULSE_ASSIGN_OR_RETURN(
      BlockSummaries summaries,
      BlockSummaries::Create(backend, layout, cache.num_layers(), tiered ? 0 : dense_blocks,
                             host_blocks, layout.num_kv_heads, config.estimator));
  std::optional<Tiers> tiers;
  if (tiered) {
    if (config.host_codec != HostCodec::kRaw && sets > 1 &&
        (config.executor == CopyExecutor::kBatchDma ||
         config.executor == CopyExecutor::kPerChunk)) {
      return absl::UnimplementedError(
          "an fp8 host tier with head-wise selection and a host-planned copy executor");
    }
    PULSE_ASSIGN_OR_RETURN(HostTier host,
                           HostTier::Create(backend, layout, cache.num_layers(), host_blocks,
                                            config.host_chunk_bytes, config.host_codec));
    PULSE_ASSIGN_OR_RETURN(
        SlotDirectory directory,
        SlotDirectory::Create(backend, cache.num_layers(), sets, slots, host_blocks, dense_blocks,
                              config.eviction == EvictionKind::kScoreAware));
    tiers.emplace(Tiers{std::move(host), std::move(directory)});
  }
  std::vector<void*> layers(static_cast<size_t>(cache.num_layers()));
  for (size_t layer = 0; layer < layers.size(); ++layer) {
    layers[layer] = cache.layer(static_cast<int32_t>(layer));
  }
  auto sparse = std::unique_ptr<SparseAttention>(
      new SparseAttention(backend, std::move(layers), layout, dense_blocks, config, limits,
                          std::move(summaries), std::move(tiers)));
  if (sparse->tiers_) {
    PULSE_ASSIGN_OR_RETURN(sparse->move_done_, backend.CreateCopyEvent());
    PULSE_ASSIGN_OR_RETURN(
        sparse->staged_,
        StagedPrefill::Create(
            backend, layout, cache.num_layers(),
            StagedPrefill::Blocks(limits.max_blocks_per_seq, limits.max_step_tokens,
                                  limits.max_seqs, layout.block_tokens),
            sparse->tiers_->host, sparse->summaries_));
    std::vector<SlotLayer> slot_layers;
    for (size_t layer = 0; layer < sparse->layers_.size(); ++layer) {
      slot_layers.push_back(
          {.directory = sparse->tiers_->directory.view(static_cast<int32_t>(layer)),
           .blocks = sparse->layers_[layer]});
    }
    const size_t bytes = slot_layers.size() * sizeof(SlotLayer);
    PULSE_ASSIGN_OR_RETURN(sparse->slot_layers_, backend.Allocate(bytes));
    backend.CopyToDevice(sparse->slot_layers_.data(), slot_layers.data(), bytes);
  }
  return sparse;
}

SparseAttention::SparseAttention(Backend& backend, std::vector<void*> layers,
                                 const PagedKvLayout& layout, int32_t dense_blocks,
                                 const OffloadConfig& config, const SparseLimits& limits,
                                 BlockSummaries summaries, std::optional<Tiers> tiers)
    : backend_(backend),
      layers_(std::move(layers)),
      layout_(layout),
      dense_blocks_(dense_blocks),
      config_(config),
      limits_(limits),
      summaries_(std::move(summaries)),
      tiers_(std::move(tiers)) {}

SparseAttention::~SparseAttention() = default;

absl::StatusOr<std::unique_ptr<SparseStep>> SparseAttention::NewStep(int32_t max_seqs,
                                                                     int32_t max_step_tokens) {
  if (max_seqs < 1 || max_seqs > limits_.max_seqs || max_step_tokens < 1 ||
      max_step_tokens > limits_.max_step_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sparse step: %d sequences and %d tokens, past the limits' %d and %d",
                        max_seqs, max_step_tokens, limits_.max_seqs, limits_.max_step_tokens));
  }
  auto step = std::unique_ptr<SparseStep>(new SparseStep());
  step->max_seqs = max_seqs;
  step->max_step_tokens = max_step_tokens;
  const int64_t seqs = max_seqs;
  // The most a step plans, padded as a decode step's plan may be.
  const int64_t blocks = seqs * limits_.max_blocks_per_seq;
  const int64_t candidates = RoundUp(blocks, kCandidateGranule);
  const int64_t fixed = RoundUp(blocks, kFixedGranule);
  const int64_t sets = layout_.num_kv_heads;  // the most any mode has
  const int64_t filled = max_step_tokens / layout_.block_tokens + seqs;
  const int64_t runs_offsets = 2 * seqs + 1;
  const int64_t plan_ints = 3 * candidates + fixed + seqs * (kIntsPerSegment + kIntsPerRow) +
                            filled * (2 + kIntsPerWriteBack) + runs_offsets + 1;
  const auto ints = [](int64_t count) { return static_cast<size_t>(count) * sizeof(int32_t); };
  PULSE_ASSIGN_OR_RETURN(step->plan, backend_.Allocate(ints(plan_ints)));
  const int64_t ranks = limits_.ranks == nullptr ? 1 : limits_.ranks->size();
  PULSE_ASSIGN_OR_RETURN(step->bounds,
                         backend_.Allocate(ints(ranks * limits_.num_heads * candidates)));
  if (ranks > 1) {
    PULSE_ASSIGN_OR_RETURN(step->rank_bounds,
                           backend_.Allocate(ints(limits_.num_heads * candidates)));
  }
  PULSE_ASSIGN_OR_RETURN(step->scores, backend_.Allocate(ints(sets * candidates)));
  PULSE_ASSIGN_OR_RETURN(step->picked, backend_.Allocate(ints(sets * candidates)));
  PULSE_ASSIGN_OR_RETURN(step->tables,
                         backend_.Allocate(ints(seqs * sets * limits_.max_blocks_per_seq)));
  PULSE_ASSIGN_OR_RETURN(step->kv_lens, backend_.Allocate(ints(seqs * sets)));
  if (tiers_) {
    PULSE_ASSIGN_OR_RETURN(step->departed,
                           backend_.Allocate(static_cast<size_t>(blocks) * sizeof(WriteBackEntry)));
    PULSE_ASSIGN_OR_RETURN(step->recalls,
                           backend_.Allocate(ints(sets) + static_cast<size_t>(sets * num_slots()) *
                                                              sizeof(RecallEntry)));
  }
  for (int32_t layer = 0; layer < static_cast<int32_t>(layers_.size()); ++layer) {
    SparseStep::LayerEvents events;
    PULSE_ASSIGN_OR_RETURN(events.recall_start, backend_.CreateCopyEvent());
    PULSE_ASSIGN_OR_RETURN(events.recall_end, backend_.CreateCopyEvent());
    PULSE_ASSIGN_OR_RETURN(events.writeback_start, backend_.CreateCopyEvent());
    PULSE_ASSIGN_OR_RETURN(events.writeback, backend_.CreateCopyEvent());
    step->events.push_back(std::move(events));
  }
  return step;
}

absl::Status SparseAttention::BeginStep() {
  if (step_stamp_ == std::numeric_limits<int32_t>::max()) {
    return absl::ResourceExhaustedError("sparse attention has run 2^31 steps");
  }
  ++step_stamp_;
  step_picks_ = 0;
  step_mode_ = std::nullopt;
  return absl::OkStatus();
}

absl::Status SparseAttention::Plan(std::span<const SparseSequence> sequences, int64_t* counters,
                                   SparseStep& step) {
  const auto started = std::chrono::steady_clock::now();
  int32_t tokens = 0;
  for (const SparseSequence& sequence : sequences) tokens += sequence.new_tokens;
  if (static_cast<int64_t>(sequences.size()) > step.max_seqs || tokens > step.max_step_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sparse step: %d sequences of %d tokens, past the step's %d and %d",
                        sequences.size(), tokens, step.max_seqs, step.max_step_tokens));
  }
  const int32_t block_tokens = layout_.block_tokens;
  plan_lists_.Clear();
  std::vector<int32_t>& summary_ids = plan_lists_.summary_ids;
  std::vector<int32_t>& query_rows = plan_lists_.query_rows;
  std::vector<int32_t>& candidate_blocks = plan_lists_.candidate_blocks;
  std::vector<int32_t>& fixed = plan_lists_.fixed;
  std::vector<ScoreSegment>& segments = plan_lists_.segments;
  std::vector<SparseTableRow>& rows = plan_lists_.rows;
  std::vector<int32_t>& filled_blocks = plan_lists_.filled_blocks;
  std::vector<int32_t>& filled_summaries = plan_lists_.filled_summaries;
  std::vector<WriteBackEntry>& writebacks = plan_lists_.writebacks;
  std::vector<WriteBackEntry>& departed = plan_lists_.departed;
  std::vector<SparseAttentionStats>& row_stats = plan_lists_.row_stats;
  std::vector<uint64_t> row_keys;
  std::vector<bool> sparse(sequences.size(), false);
  std::optional<SelectionMode> mode = step_mode_;
  int32_t num_sets = mode.has_value() ? SelectionSets(*mode, layout_) : 0;
  int32_t offloaded_picks = 0;
  int32_t picks_before = 0;
  int32_t table_stride = 1;
  int32_t max_kv_len = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const SparseSequence& sequence = sequences[s];
    if (sequence.selection == nullptr) continue;
    const bool offloaded = !sequence.host_blocks.empty();
    // With a host tier every sparse row is offloaded, in the runner's mode: only host-tier
    // blocks keep summaries, and the slots are laid out for that mode.
    if (offloaded != tiers_.has_value() ||
        (offloaded && sequence.selection->mode != config_.selection.mode)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sequence %d %s", s,
          !offloaded ? "attends sparsely but is not offloaded, and the runner has a host tier"
          : !tiers_  ? "is offloaded, but the runner has no host tier"
                     : "is offloaded, but the runner offloads in the other selection mode"));
    }
    for (const WriteBackEntry& entry : sequence.departed) {
      if (!offloaded || entry.device_block < 0 || entry.device_block >= dense_blocks_ ||
          entry.host_block < 0 || entry.host_block >= host_blocks()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("sequence %d gave up dense block %d (of %d) as host block %d (of %d)%s",
                            s, entry.device_block, dense_blocks_, entry.host_block, host_blocks(),
                            offloaded ? "" : ", but it is not offloaded"));
      }
      if (config_.fill_free_slots) departed.push_back(entry);
    }
    // The blocks this step fills: summarized, and written back once when offloaded.
    for (int32_t position = sequence.kv_len - sequence.new_tokens; position < sequence.kv_len;
         ++position) {
      if ((position + 1) % block_tokens != 0) continue;
      const auto logical = static_cast<size_t>(position / block_tokens);
      const int32_t device = sequence.blocks[logical];
      filled_blocks.push_back(device);
      if (offloaded) {
        filled_summaries.push_back(summaries_.host_id(sequence.host_blocks[logical]));
        writebacks.push_back({device, sequence.host_blocks[logical]});
      } else {
        filled_summaries.push_back(summaries_.dense_id(device));
      }
    }
    if (sequence.new_tokens != 1) continue;  // a prompt chunk attends densely
    PULSE_ASSIGN_OR_RETURN(const BlockSelector selector,
                           BlockSelector::Create(layout_, limits_.num_heads, *sequence.selection));
    PULSE_ASSIGN_OR_RETURN(const BlockPartition partition, selector.Partition(sequence.kv_len));
    // Compared by mode, not by set count: a rank of one KV head has one set in either mode.
    if (mode.has_value() && *mode != sequence.selection->mode) {
      return absl::InvalidArgumentError(
          "the sparse rows of one step must select in one mode (solohead or headwise)");
    }
    num_sets = selector.num_sets();
    mode = sequence.selection->mode;
    const auto first_candidate = static_cast<int32_t>(summary_ids.size());
    if (offloaded) {
      // Every candidate of an offloaded row is a host-tier block: appended whole.
      const std::span<const int32_t> candidates = sequence.host_blocks.subspan(
          static_cast<size_t>(partition.sink_end), static_cast<size_t>(partition.num_candidates()));
      candidate_blocks.insert(candidate_blocks.end(), candidates.begin(), candidates.end());
      summary_ids.resize(summary_ids.size() + candidates.size());
      std::transform(candidates.begin(), candidates.end(),
                     summary_ids.end() - static_cast<std::ptrdiff_t>(candidates.size()),
                     [this](int32_t block) { return summaries_.host_id(block); });
      query_rows.insert(query_rows.end(), candidates.size(), sequence.first_row);
    } else {
      for (int32_t logical = partition.sink_end; logical < partition.window_begin; ++logical) {
        const int32_t block = sequence.blocks[static_cast<size_t>(logical)];
        if (block < 0) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "block %d of sequence %d is not resident, and the sequence is not offloaded", logical,
              s));
        }
        summary_ids.push_back(summaries_.dense_id(block));
        candidate_blocks.push_back(block);
        query_rows.push_back(sequence.first_row);
      }
    }
    const auto fixed_first = static_cast<int32_t>(fixed.size());
    for (const auto& [begin, end] : {std::pair{0, partition.sink_end},
                                     std::pair{partition.window_begin, partition.num_blocks}}) {
      for (int32_t logical = begin; logical < end; ++logical) {
        const int32_t device = sequence.blocks[static_cast<size_t>(logical)];
        if (device < 0) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "block %d of sequence %d is a sink or window block, but it is not resident", logical,
              s));
        }
        fixed.push_back(device);
      }
    }
    const auto row = static_cast<int32_t>(rows.size());
    const int32_t count = partition.num_candidates();
    segments.push_back(selector.Segment(first_candidate, count, first_candidate * num_sets,
                                        partition.picks, picks_before * num_sets));
    rows.push_back({.segment = row,
                    .fixed_first = fixed_first,
                    .sink_blocks = partition.sink_end,
                    .window_blocks = partition.num_blocks - partition.window_begin,
                    .kv_len = partition.selected_tokens,
                    .offloaded = offloaded ? 1 : 0,
                    .picks_before = picks_before});
    picks_before += partition.picks;
    if (offloaded) offloaded_picks += partition.picks;
    table_stride = std::max(table_stride, partition.blocks_per_set());
    max_kv_len = std::max(max_kv_len, partition.selected_tokens);
    // Every layer but the dense ones selects: the totals count (sequence, layer, set)
    // selections.
    const int64_t dense = std::min<int64_t>(config_.dense_layers, std::ssize(layers_));
    const int64_t layers = std::ssize(layers_) - dense;
    row_stats.push_back(
        {.selections = layers * num_sets,
         .candidate_blocks = layers * count * num_sets,
         .picked_blocks = layers * partition.picks * num_sets,
         .attended_tokens = layers * partition.selected_tokens + dense * sequence.kv_len,
         .context_tokens = std::ssize(layers_) * sequence.kv_len});
    row_keys.push_back(sequence.key);
    sparse[s] = true;
  }
  if (tiers_ && step_picks_ + offloaded_picks > num_slots()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the device tier holds %d slots a layer, fewer than this step's %d picks",
                        num_slots(), step_picks_ + offloaded_picks));
  }

  const int32_t real_writebacks = static_cast<int32_t>(writebacks.size());
  const bool offloaded = std::any_of(rows.begin(), rows.end(),
                                     [](const SparseTableRow& row) { return row.offloaded != 0; });
  const bool decode = std::all_of(sequences.begin(), sequences.end(),
                                  [](const SparseSequence& s) { return s.new_tokens == 1; });
  if (decode) {
    const auto seqs = sequences.size();
    const auto candidates =
        static_cast<size_t>(RoundUp(static_cast<int64_t>(summary_ids.size()), kCandidateGranule));
    summary_ids.resize(candidates, 0);
    query_rows.resize(candidates, 0);
    candidate_blocks.resize(candidates, 0);
    fixed.resize(static_cast<size_t>(RoundUp(static_cast<int64_t>(fixed.size()), kFixedGranule)),
                 0);
    filled_blocks.resize(seqs, -1);
    filled_summaries.resize(seqs, 0);
    if (offloaded) writebacks.resize(seqs, WriteBackEntry{-1, 0});
    table_stride = static_cast<int32_t>(
        std::min<int64_t>(RoundUp(table_stride, kTableGranule), limits_.max_blocks_per_seq));
    max_kv_len = static_cast<int32_t>(std::min<int64_t>(
        RoundUp(max_kv_len, kKvLenGranule), int64_t{limits_.max_blocks_per_seq} * block_tokens));
  }

  // Runs of consecutive sequences of one kind, each with its query offsets.
  step.runs.clear();
  std::vector<int32_t> run_offsets;
  int32_t sparse_row = 0;
  for (size_t s = 0; s < sequences.size();) {
    SparseStep::Run run{.first_seq = static_cast<int32_t>(s),
                        .first_row = sequences[s].first_row,
                        .sparse = sparse[s],
                        .first_sparse_row = sparse_row};
    run.q_offsets = run_offsets.size();
    size_t end = s;
    for (; end < sequences.size() && sparse[end] == run.sparse; ++end) {
      run_offsets.push_back(sequences[end].first_row - run.first_row);
      run.max_q_len = std::max(run.max_q_len, sequences[end].new_tokens);
      run.num_rows += sequences[end].new_tokens;
      if (run.sparse) ++sparse_row;
    }
    run_offsets.push_back(run.num_rows);
    run.end_seq = static_cast<int32_t>(end);
    step.runs.push_back(run);
    s = end;
  }

  // The plan, staged in one upload.
  std::vector<int32_t>& staging = step.staging;
  staging.clear();
  SparseStep::Offsets& at = step.at;
  at.summary_ids = Stage<int32_t>(staging, summary_ids);
  at.query_rows = Stage<int32_t>(staging, query_rows);
  at.candidate_blocks = Stage<int32_t>(staging, candidate_blocks);
  at.fixed = Stage<int32_t>(staging, fixed);
  at.segments = Stage<ScoreSegment>(staging, segments);
  at.rows = Stage<SparseTableRow>(staging, rows);
  at.filled_blocks = Stage<int32_t>(staging, filled_blocks);
  at.filled_summaries = Stage<int32_t>(staging, filled_summaries);
  at.writebacks = Stage<WriteBackEntry>(staging, writebacks);
  const size_t offsets = Stage<int32_t>(staging, run_offsets);
  for (SparseStep::Run& run : step.runs) run.q_offsets += offsets;
  step.num_rows = static_cast<int32_t>(rows.size());
  at.stamp = staging.size();
  staging.push_back(step_stamp_);
  if (staging.size() * sizeof(int32_t) > step.plan.bytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the step's sparse plan of %d ints exceeds the limits' %d", staging.size(),
                        step.plan.bytes() / sizeof(int32_t)));
  }
  if (departed.size() * sizeof(WriteBackEntry) > step.departed.bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the step's sequences gave up %d blocks, more than the limits' blocks", departed.size()));
  }
  backend_.CopyToDevice(step.plan.data(), staging.data(), staging.size() * sizeof(int32_t));
  if (!departed.empty()) {
    // Before this step's layers write anything: a given-up dense block may be reused by them.
    const size_t bytes = departed.size() * sizeof(WriteBackEntry);
    backend_.CopyToDevice(step.departed.data(), departed.data(), bytes);
    backend_.AdoptFreeSlots(slot_layers_.as<const SlotLayer>(),
                            static_cast<int32_t>(layers_.size()), tiers_->directory.num_sets(),
                            num_slots(), step.departed.as<const WriteBackEntry>(),
                            static_cast<int32_t>(departed.size()), layout_);
  }
  step_picks_ += offloaded_picks;
  step_mode_ = mode;

  step.counters = counters;
  step.row_keys = std::move(row_keys);
  step.num_candidates = static_cast<int32_t>(summary_ids.size());
  step.num_sets = std::max(num_sets, 1);
  step.gathers_bounds =
      limits_.ranks != nullptr && mode == SelectionMode::kSoloHead && !config_.rank_sets;
  step.table_stride = table_stride;
  step.max_kv_len = max_kv_len;
  step.num_filled = static_cast<int32_t>(filled_blocks.size());
  step.num_writebacks = static_cast<int32_t>(writebacks.size());
  step.offloaded = offloaded;
  step.tables_built = false;
  // Every layer does the same: a replayed graph of the step runs no host code per layer, so the
  // copies' bookkeeping is the plan's.
  for (SparseStep::LayerEvents& events : step.events) {
    events.wrote_back = step.num_writebacks > 0;
    events.recalled = offloaded && step.num_rows > 0;
  }
  const auto layers = static_cast<int64_t>(layers_.size());
  offload_stats_.writeback_blocks += layers * real_writebacks;
  offload_stats_.writeback_bytes += layers * real_writebacks * host_block_bytes();
  if (offloaded && step.num_rows > 0) offload_stats_.recall_plans += layers;
  for (size_t r = 0; r < row_stats.size(); ++r) {
    Add(stats_, row_stats[r]);
    Add(key_stats_[step.row_keys[r]], row_stats[r]);
  }
  stats_.planning_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return absl::OkStatus();
}

void SparseAttention::PlanLists::Clear() {
  summary_ids.clear();
  query_rows.clear();
  candidate_blocks.clear();
  fixed.clear();
  segments.clear();
  rows.clear();
  filled_blocks.clear();
  filled_summaries.clear();
  writebacks.clear();
  departed.clear();
  row_stats.clear();
}

bool SparseAttention::Attends(const SparseStep& step) const { return step.num_rows > 0; }

absl::Status SparseAttention::AfterAppend(int32_t layer, SparseStep& step) {
  const int32_t* plan = step.plan_ints();
  void* blocks = layers_[static_cast<size_t>(layer)];
  if (step.num_filled > 0) {
    summaries_.Summarize(layer, blocks, plan + step.at.filled_blocks,
                         plan + step.at.filled_summaries, step.num_filled);
  }
  if (step.num_writebacks == 0) return absl::OkStatus();
  SparseStep::LayerEvents& events = step.events[static_cast<size_t>(layer)];
  // A marker before it on the copy stream times it (it starts after compute, as it does).
  PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy(
      {.direction = CopyDirection::kDeviceToHost, .after_compute = true}, *events.writeback_start));
  PULSE_RETURN_IF_ERROR(backend_.EnqueueWriteBack(
      reinterpret_cast<const WriteBackEntry*>(plan + step.at.writebacks), step.num_writebacks,
      tiers_->host.view(), layer, blocks, layout_, *events.writeback));
  return absl::OkStatus();
}

absl::Status SparseAttention::Select(int32_t layer, SparseStep& step, const float* q,
                                     int64_t q_stride) {
  const int32_t* plan = step.plan_ints();
  const auto* segments = reinterpret_cast<const ScoreSegment*>(plan + step.at.segments);
  if (step.num_rows > 0) {
    float* bounds = step.bounds.as<float>();
    float* scores = step.scores.as<float>();
    int32_t* picked = step.picked.as<int32_t>();
    if (step.num_candidates > 0) {
      // One set over the heads of several ranks: each scores its heads, then all aggregate all.
      const bool gather = step.gathers_bounds;
      float* rank_bounds = gather ? step.rank_bounds.as<float>() : bounds;
      backend_.ScoreBlocks(q, q_stride, limits_.num_heads, layout_, summaries_.estimator(),
                           summaries_.layer(layer), plan + step.at.summary_ids,
                           plan + step.at.query_rows, step.num_candidates, rank_bounds);
      int32_t heads = limits_.num_heads;
      if (gather) {
        limits_.ranks->AllGather(
            rank_bounds, 1,
            static_cast<size_t>(heads) * static_cast<size_t>(step.num_candidates) * sizeof(float),
            bounds);
        heads *= limits_.ranks->size();
      }
      backend_.AggregateScores(bounds, heads, step.num_candidates, segments, step.num_rows,
                               step.num_sets, scores);
      if (config_.synthetic_picks) {
        backend_.DrawSyntheticScores(plan + step.at.summary_ids, segments, step.num_rows,
                                     step.num_sets, plan + step.at.stamp, *config_.synthetic_picks,
                                     layer, scores);
      }
      backend_.SelectTopBlocks(scores, segments, step.num_rows, step.num_sets, picked);
    }
    int32_t* counts = step.recalls.empty() ? nullptr : step.recalls.as<int32_t>();
    SparseTableBuild build{.segments = segments,
                           .rows = reinterpret_cast<const SparseTableRow*>(plan + step.at.rows),
                           .num_rows = step.num_rows,
                           .num_sets = step.num_sets,
                           .picked = picked,
                           .scores = scores,
                           .candidate_blocks = plan + step.at.candidate_blocks,
                           .summary_ids = plan + step.at.summary_ids,
                           .fixed_blocks = plan + step.at.fixed,
                           .step = plan + step.at.stamp,
                           .pick_stamps = summaries_.pick_stamps(layer),
                           .num_summaries = summaries_.count(),
                           .directory = {},
                           .tables = step.tables.as<int32_t>(),
                           .table_stride = step.table_stride,
                           .kv_lens = step.kv_lens.as<int32_t>(),
                           .recalls = {},
                           .counters = step.counters};
    if (tiers_ && step.offloaded) {
      build.directory = tiers_->directory.view(layer);
      build.recalls = {.entries = reinterpret_cast<RecallEntry*>(counts + layout_.num_kv_heads),
                       .counts = counts,
                       .capacity = num_slots()};
    }
    backend_.BuildSparseTables(build);
    step.tables_built = true;
    if (tiers_ && step.offloaded) PULSE_RETURN_IF_ERROR(Recall(layer, step));
  }
  return absl::OkStatus();
}

absl::Status SparseAttention::Attend(int32_t layer, SparseStep& step, const float* q,
                                     int64_t q_stride, float scale, void* out,
                                     int64_t out_row_bytes, const PagedKvBatch& dense) {
  const int32_t* plan = step.plan_ints();
  void* blocks = layers_[static_cast<size_t>(layer)];
  if (step.num_rows > 0 && tiers_ && step.offloaded) {
    PULSE_RETURN_IF_ERROR(
        backend_.WaitForCopy(*step.events[static_cast<size_t>(layer)].recall_end));
  }
  for (const SparseStep::Run& run : step.runs) {
    PagedKvBatch kv;
    if (run.sparse) {
      const int32_t table_rows = run.first_sparse_row * step.num_sets;
      kv.blocks = blocks;
      kv.layout = layout_;
      kv.num_seqs = run.end_seq - run.first_seq;
      kv.max_blocks_per_seq = step.table_stride;
      kv.block_tables = step.tables.as<int32_t>() + int64_t{table_rows} * step.table_stride;
      kv.kv_lens = step.kv_lens.as<int32_t>() + table_rows;
      kv.max_kv_len = step.max_kv_len;
      kv.table_heads = step.num_sets;
    } else {
      kv = dense;
      kv.num_seqs = run.end_seq - run.first_seq;
      kv.block_tables = dense.block_tables + int64_t{run.first_seq} * dense.max_blocks_per_seq;
      kv.kv_lens = dense.kv_lens + run.first_seq;
    }
    kv.q_offsets = plan + run.q_offsets;
    kv.num_rows = run.num_rows;
    kv.max_q_len = run.max_q_len;
    backend_.Attention(q + run.first_row * q_stride, q_stride, limits_.num_heads, kv, scale,
                       static_cast<char*>(out) + run.first_row * out_row_bytes);
  }
  return absl::OkStatus();
}

absl::Status SparseAttention::Recall(int32_t layer, SparseStep& step) {
  SparseStep::LayerEvents& events = step.events[static_cast<size_t>(layer)];
  // The slots recalled into may still be read by an earlier step: after compute.
  PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy(
      {.direction = CopyDirection::kHostToDevice, .after_compute = true}, *events.recall_start));
  if (config_.executor == CopyExecutor::kBatchDma || config_.executor == CopyExecutor::kPerChunk) {
    PULSE_RETURN_IF_ERROR(RecallPlannedOnHost(layer, step));
  } else {
    int32_t* counts = step.recalls.as<int32_t>();
    PULSE_RETURN_IF_ERROR(backend_.EnqueueRecall(
        {.entries = reinterpret_cast<RecallEntry*>(counts + layout_.num_kv_heads),
         .counts = counts,
         .capacity = num_slots()},
        step.num_sets, tiers_->host.view(), layer, layers_[static_cast<size_t>(layer)],
        dense_blocks_, layout_, *events.recall_end));
  }
  return absl::OkStatus();
}

absl::Status SparseAttention::RecallPlannedOnHost(int32_t layer, SparseStep& step) {
  const int32_t sets = step.num_sets;
  std::vector<int32_t> list(step.recalls.bytes() / sizeof(int32_t));
  PULSE_RETURN_IF_ERROR(
      backend_.CopyToHost(list.data(), step.recalls.data(), step.recalls.bytes()));
  const auto* entries = reinterpret_cast<const RecallEntry*>(list.data() + layout_.num_kv_heads);
  const int64_t block_bytes = layout_.block_bytes();
  const int64_t element = static_cast<int64_t>(DTypeBytes(layout_.type));
  const int64_t fragment = layout_.head_elems() * element;
  const int64_t values = layout_.value_offset() * element;
  std::vector<CopyChunk> chunks;
  for (int32_t set = 0; set < sets; ++set) {
    for (int32_t i = 0; i < list[static_cast<size_t>(set)]; ++i) {
      const RecallEntry& entry = entries[int64_t{set} * num_slots() + i];
      const char* src = tiers_->host.block(layer, entry.host_block);
      char* dst = static_cast<char*>(layers_[static_cast<size_t>(layer)]) +
                  (dense_blocks_ + entry.slot) * block_bytes;
      if (sets == 1) {
        chunks.push_back({src, dst, static_cast<size_t>(block_bytes)});
        continue;
      }
      for (const int64_t offset : {set * fragment, values + set * fragment}) {
        chunks.push_back({src + offset, dst + offset, static_cast<size_t>(fragment)});
      }
    }
  }
  return backend_.EnqueueCopy({.direction = CopyDirection::kHostToDevice,
                               .chunks = chunks,
                               .executor = config_.executor,
                               .codec = tiers_->host.codec(),
                               .layout = layout_},
                              *step.events[static_cast<size_t>(layer)].recall_end);
}

absl::Status SparseAttention::FinishStep(SparseStep& step) {
  for (const SparseStep::LayerEvents& events : step.events) {
    if (events.wrote_back) PULSE_RETURN_IF_ERROR(backend_.WaitForCopy(*events.writeback));
  }
  return absl::OkStatus();
}

absl::Status SparseAttention::Collect(SparseStep& step, std::span<const int64_t> counters) {
  const int64_t chunks_a_miss = step.num_sets == 1 ? 1 : 2;
  const HostCodec codec = tiers_ ? tiers_->host.codec() : HostCodec::kRaw;
  const int64_t bytes_a_miss =
      step.num_sets == 1 ? HostBlockBytes(layout_, codec) : HostHeadBytes(layout_, codec);
  CacheStats cache;
  int64_t overflow = 0;
  for (int32_t r = 0; r < step.num_rows; ++r) {
    const int64_t* row = counters.data() + int64_t{r} * kSparseCounters;
    cache.hits += row[kSparseHits];
    cache.misses += row[kSparseMisses];
    cache.evictions += row[kSparseEvictions];
    overflow += row[kSparseOverflow];
    SparseAttentionStats& key = key_stats_[step.row_keys[static_cast<size_t>(r)]];
    stats_.reused_blocks += row[kSparseReused];
    key.reused_blocks += row[kSparseReused];
    stats_.recall_bytes += row[kSparseMisses] * bytes_a_miss;
    key.recall_bytes += row[kSparseMisses] * bytes_a_miss;
  }
  offload_stats_.cache.hits += cache.hits;
  offload_stats_.cache.misses += cache.misses;
  offload_stats_.cache.evictions += cache.evictions;
  offload_stats_.recall_chunks += cache.misses * chunks_a_miss;
  offload_stats_.recall_bytes += cache.misses * bytes_a_miss;
  absl::Status status;
  for (SparseStep::LayerEvents& events : step.events) {
    if (events.recalled) {
      absl::StatusOr<double> seconds =
          backend_.CopySeconds(*events.recall_start, *events.recall_end);
      if (seconds.ok()) offload_stats_.recall_seconds += *seconds;
      status.Update(seconds.status());
      events.recalled = false;
    }
    if (events.wrote_back) {
      absl::StatusOr<double> seconds =
          backend_.CopySeconds(*events.writeback_start, *events.writeback);
      if (seconds.ok()) offload_stats_.writeback_seconds += *seconds;
      status.Update(seconds.status());
    }
  }
  if (overflow > 0) {
    Abandon(step);
    return absl::InternalError(absl::StrFormat(
        "%d of the step's misses found no device slot (the plan checks that they fit)", overflow));
  }
  return status;
}

void SparseAttention::Abandon(SparseStep& step) {
  for (SparseStep::LayerEvents& events : step.events) {
    if (events.wrote_back) backend_.SynchronizeCopy(*events.writeback).IgnoreError();
    if (events.recalled) backend_.SynchronizeCopy(*events.recall_end).IgnoreError();
    events.wrote_back = events.recalled = false;
  }
  if (tiers_ && step.tables_built && step.offloaded) tiers_->directory.Clear();
  step.tables_built = false;
}

void SparseAttention::Forget(uint64_t key) { key_stats_.erase(key); }

absl::Status SparseAttention::FreeSlots(std::span<const int32_t> host_blocks) {
  return tiers_ ? tiers_->directory.Forget(host_blocks) : absl::OkStatus();
}

absl::StatusOr<double> SparseAttention::CalibrateLink(int64_t bytes) {
  if (!tiers_) return absl::FailedPreconditionError("calibrating the link without a host tier");
  const size_t size = static_cast<size_t>(bytes);
  PULSE_ASSIGN_OR_RETURN(HostBuffer host, backend_.AllocateHost(size));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer device, backend_.Allocate(size));
  std::memset(host.data(), 1, size);  // first touch, so that the copy does not fault pages in
  PULSE_ASSIGN_OR_RETURN(std::unique_ptr<CopyEvent> start, backend_.CreateCopyEvent());
  const CopyChunk chunk{host.data(), device.data(), size};
  PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({}, *start));
  PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({.chunks = {&chunk, 1}}, *move_done_));
  PULSE_RETURN_IF_ERROR(backend_.SynchronizeCopy(*move_done_));
  PULSE_ASSIGN_OR_RETURN(const double seconds, backend_.CopySeconds(*start, *move_done_));
  return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
}

absl::Status SparseAttention::CheckMove(std::span<const int32_t> device_blocks,
                                        std::span<const int32_t> host_blocks) const {
  if (!tiers_) return absl::FailedPreconditionError("a tier move without a host tier");
  if (device_blocks.size() != host_blocks.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a tier move of %d device blocks and %d host blocks", device_blocks.size(),
                        host_blocks.size()));
  }
  for (size_t i = 0; i < device_blocks.size(); ++i) {
    if (device_blocks[i] < 0 || device_blocks[i] >= dense_blocks_ || host_blocks[i] < 0 ||
        host_blocks[i] >= tiers_->host.capacity()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a tier move between device block %d (of %d) and host block %d (of %d pinned)",
          device_blocks[i], dense_blocks_, host_blocks[i], tiers_->host.capacity()));
    }
  }
  if (move_done_ == nullptr) {
    return absl::InternalError("the tier move's event was not made");  // Create makes it
  }
  return absl::OkStatus();
}

absl::Status SparseAttention::MoveToHost(std::span<const int32_t> device_blocks,
                                         std::span<const int32_t> host_blocks) {
  PULSE_RETURN_IF_ERROR(CheckMove(device_blocks, host_blocks));
  if (device_blocks.empty()) return absl::OkStatus();
  const auto count = static_cast<int32_t>(device_blocks.size());
  std::vector<int32_t> lists(device_blocks.begin(), device_blocks.end());
  for (const int32_t block : host_blocks) lists.push_back(summaries_.host_id(block));
  for (size_t i = 0; i < device_blocks.size(); ++i) {
    lists.push_back(device_blocks[i]);
    lists.push_back(host_blocks[i]);
  }
  const size_t bytes = lists.size() * sizeof(int32_t);
  if (move_lists_.bytes() < bytes) {
    PULSE_ASSIGN_OR_RETURN(move_lists_, backend_.Allocate(bytes));
  }
  backend_.CopyToDevice(move_lists_.data(), lists.data(), bytes);
  const int32_t* device = move_lists_.as<const int32_t>();
  for (int32_t layer = 0; layer < static_cast<int32_t>(layers_.size()); ++layer) {
    void* blocks = layers_[static_cast<size_t>(layer)];
    summaries_.Summarize(layer, blocks, device, device + count, count);
    PULSE_RETURN_IF_ERROR(backend_.EnqueueWriteBack(
        reinterpret_cast<const WriteBackEntry*>(device + 2 * int64_t{count}), count,
        tiers_->host.view(), layer, blocks, layout_, *move_done_));
  }
  offload_stats_.writeback_blocks += int64_t{count} * static_cast<int64_t>(layers_.size());
  offload_stats_.writeback_bytes +=
      int64_t{count} * static_cast<int64_t>(layers_.size()) * host_block_bytes();
  return backend_.WaitForCopy(*move_done_);
}

absl::Status SparseAttention::MoveToDevice(std::span<const int32_t> host_blocks,
                                           std::span<const int32_t> device_blocks) {
  PULSE_RETURN_IF_ERROR(CheckMove(device_blocks, host_blocks));
  if (device_blocks.empty()) return absl::OkStatus();
  const int64_t block_bytes = layout_.block_bytes();
  std::vector<CopyChunk> chunks;
  for (int32_t layer = 0; layer < static_cast<int32_t>(layers_.size()); ++layer) {
    chunks.clear();
    for (size_t i = 0; i < host_blocks.size(); ++i) {
      chunks.push_back(
          {tiers_->host.block(layer, host_blocks[i]),
           static_cast<char*>(layers_[static_cast<size_t>(layer)]) + device_blocks[i] * block_bytes,
           static_cast<size_t>(block_bytes)});
    }
    // After compute: the last step's write-backs of these blocks were enqueued before.
    PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({.direction = CopyDirection::kHostToDevice,
                                                .chunks = chunks,
                                                .after_compute = true,
                                                .codec = tiers_->host.codec(),
                                                .layout = layout_},
                                               *move_done_));
  }
  return backend_.WaitForCopy(*move_done_);
}

OffloadStats SparseAttention::offload_stats() const {
  OffloadStats stats = offload_stats_;
  if (staged_) stats.staged = staged_->stats();
  return stats;
}

SparseAttentionStats SparseAttention::stats(uint64_t key) const {
  const auto it = key_stats_.find(key);
  return it == key_stats_.end() ? SparseAttentionStats{} : it->second;
}

}  // namespace pulse
