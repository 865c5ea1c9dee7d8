#include "core/offload/selection.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "core/backend/reference/block_summary.h"
#include "core/backend/reference/sparse_selection.h"
#include "core/kv/block_table.h"

namespace pulse {
namespace {

// Tokens of a sequence of `num_tokens` tokens held by its logical blocks [begin, end).
int32_t TokensInBlocks(int32_t begin, int32_t end, int32_t block_tokens, int32_t num_tokens) {
  const auto tokens_before = [&](int32_t block) {
    return static_cast<int32_t>(std::min<int64_t>(int64_t{block} * block_tokens, num_tokens));
  };
  return tokens_before(end) - tokens_before(begin);
}

}  // namespace

std::span<const int32_t> BlockSelection::set(int32_t index) const {
  const size_t per_set = static_cast<size_t>(partition.blocks_per_set());
  return std::span<const int32_t>(blocks).subspan(static_cast<size_t>(index) * per_set, per_set);
}

absl::StatusOr<BlockSelector> BlockSelector::Create(const PagedKvLayout& layout,
                                                    int32_t num_query_heads,
                                                    const SelectionOptions& options) {
  if (layout.block_tokens <= 0 || layout.num_kv_heads <= 0 || layout.head_dim <= 0 ||
      num_query_heads <= 0 || num_query_heads % layout.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "block selection over blocks of %d tokens x %d KV heads x %d dims for %d query heads",
        layout.block_tokens, layout.num_kv_heads, layout.head_dim, num_query_heads));
  }
  if (options.budget_tokens < 0 || options.sink_tokens < 0 || options.window_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block selection with a budget of %d tokens, %d sink and %d window tokens",
                        options.budget_tokens, options.sink_tokens, options.window_tokens));
  }
  // With no sink and no window, a budget below a block picks nothing when the newest token fills
  // its block (that block is then a candidate): the query would attend to nothing.
  if (options.sink_tokens == 0 && options.window_tokens == 0 &&
      options.budget_tokens < layout.block_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "block selection with no sink, no window and a budget of %d tokens, less than a block of "
        "%d, may attend to nothing",
        options.budget_tokens, layout.block_tokens));
  }
  const float logit_scale =
      options.logit_scale.value_or(1.0f / std::sqrt(static_cast<float>(layout.head_dim)));
  if (!(logit_scale > 0.0f) || std::isinf(logit_scale)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block selection with a logit scale of %g", logit_scale));
  }
  return BlockSelector(layout, num_query_heads, options, logit_scale);
}

BlockRange NonResidentBlocks(int32_t position, int32_t block_tokens,
                             const SelectionOptions& options) {
  const BlockPartition partition = PartitionBlocks(position + 1, block_tokens, options);
  return {.begin = partition.sink_end,
          .end = std::min(partition.window_begin, position / block_tokens)};
}

BlockPartition PartitionBlocks(int32_t num_tokens, int32_t block_tokens,
                               const SelectionOptions& options) {
  BlockPartition partition;
  partition.num_blocks = BlocksForTokens(num_tokens, block_tokens);
  partition.sink_end =
      std::min(BlocksForTokens(options.sink_tokens, block_tokens), partition.num_blocks);
  // With no window this is the partial tail block, or num_blocks when there is none.
  const int32_t window_begin = std::max(num_tokens - options.window_tokens, 0) / block_tokens;
  partition.window_begin = std::max(window_begin, partition.sink_end);
  const int32_t forced_tokens =
      TokensInBlocks(0, partition.sink_end, block_tokens, num_tokens) +
      TokensInBlocks(partition.window_begin, partition.num_blocks, block_tokens, num_tokens);
  const int32_t room = std::max(options.budget_tokens - forced_tokens, 0);
  partition.picks = std::min(room / block_tokens, partition.num_candidates());
  partition.selected_tokens = forced_tokens + partition.picks * block_tokens;
  return partition;
}

absl::StatusOr<BlockPartition> BlockSelector::Partition(int32_t num_tokens) const {
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block selection over %d tokens", num_tokens));
  }
  return PartitionBlocks(num_tokens, layout_.block_tokens, options_);
}

int32_t SelectionSets(SelectionMode mode, const PagedKvLayout& layout) {
  return mode == SelectionMode::kSoloHead ? 1 : layout.num_kv_heads;
}

int32_t BlockSelector::num_sets() const { return SelectionSets(options_.mode, layout_); }

ScoreSegment BlockSelector::Segment(int32_t first, int32_t count, int32_t scores_first,
                                    int32_t picks, int32_t picks_first) const {
  return ScoreSegment{.first = first,
                      .count = count,
                      .num_sets = num_sets(),
                      .aggregate = options_.aggregate,
                      .logit_scale = logit_scale_,
                      .scores_first = scores_first,
                      .picks = picks,
                      .picks_first = picks_first};
}

absl::StatusOr<BlockSelection> BlockSelector::Select(int32_t num_tokens,
                                                     std::span<const float> bounds) const {
  PULSE_ASSIGN_OR_RETURN(const BlockPartition partition, Partition(num_tokens));
  const auto num_candidates = static_cast<size_t>(partition.num_candidates());
  if (bounds.size() != static_cast<size_t>(num_query_heads_) * num_candidates) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bounds for %d query heads x %d candidate blocks", bounds.size(),
                        num_query_heads_, num_candidates));
  }
  std::vector<float> scores(static_cast<size_t>(num_sets()) * num_candidates);
  const ScoreSegment segment = Segment(0, partition.num_candidates(), 0, partition.picks, 0);
  PULSE_RETURN_IF_ERROR(
      reference::AggregateScores(bounds, num_query_heads_, std::span(&segment, 1), scores));
  return SelectScored(num_tokens, std::move(scores));
}

absl::StatusOr<BlockSelection> BlockSelector::SelectScored(int32_t num_tokens,
                                                           std::vector<float> scores) const {
  PULSE_ASSIGN_OR_RETURN(const BlockPartition partition, Partition(num_tokens));
  const auto num_candidates = static_cast<size_t>(partition.num_candidates());
  const auto sets = static_cast<size_t>(num_sets());
  if (scores.size() != sets * num_candidates) {
    return absl::InvalidArgumentError(absl::StrFormat("%d scores for %d sets x %d candidate blocks",
                                                      scores.size(), sets, num_candidates));
  }
  BlockSelection selection{
      .partition = partition, .num_sets = static_cast<int32_t>(sets), .scores = std::move(scores)};
  selection.blocks.reserve(sets * static_cast<size_t>(partition.blocks_per_set()));
  std::vector<int32_t> picked(static_cast<size_t>(partition.picks));
  for (size_t set = 0; set < sets; ++set) {
    reference::SelectTop(
        std::span<const float>(selection.scores).subspan(set * num_candidates, num_candidates),
        picked);
    for (int32_t block = 0; block < partition.sink_end; ++block) selection.blocks.push_back(block);
    for (const int32_t candidate : picked)
      selection.blocks.push_back(partition.sink_end + candidate);
    for (int32_t block = partition.window_begin; block < partition.num_blocks; ++block) {
      selection.blocks.push_back(block);
    }
  }
  return selection;
}

}  // namespace pulse
