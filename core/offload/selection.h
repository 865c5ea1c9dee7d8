// Which KV blocks one decode step of one request attends to in one layer (Quest-style selection):
// the attention-sink blocks and the recent window always, and the best-scoring other blocks
// within a token budget, scored by the upper bounds of q.k over the summaries' boxes
// (block_summary.h: Quest's bound at summary radius 1, the box centre's q.k at 0). The rules;
// a step's selection runs on the backend (Backend::SelectTopBlocks, in the order of
// reference::SelectTop, which SelectScored ranks by).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/backend/block_scores.h"
#include "core/backend/paged_kv.h"
#include "core/base/status.h"

namespace pulse {

enum class SelectionMode : uint8_t {
  // One block set for the layer, shared by all KV heads: a recalled block is one contiguous chunk.
  kSoloHead,
  // Each KV head picks its own blocks from its query heads' bounds: recall moves per-head
  // fragments. The baseline to compare accuracy and I/O against.
  kHeadWise,
};

struct SelectionOptions {
  SelectionMode mode = SelectionMode::kSoloHead;
  HeadAggregate aggregate = HeadAggregate::kSoftmaxSum;
  // Tokens attended at most, the sink and window blocks included (except when those alone exceed
  // it: they are always selected).
  int32_t budget_tokens = 2048;
  int32_t sink_tokens = 4;
  int32_t window_tokens = 16;
  // The attention's scale of q.k; 1/sqrt(head_dim) when unset.
  std::optional<float> logit_scale = std::nullopt;
};

// How selection splits a sequence's logical blocks, in order: the sinks [0, sink_end), the
// candidates [sink_end, window_begin), scored and picked within the budget, and the window
// [window_begin, num_blocks), which ends with the partial tail block when there is one.
struct BlockPartition {
  int32_t num_blocks = 0;
  int32_t sink_end = 0;
  int32_t window_begin = 0;
  int32_t picks = 0;            // candidates selected in each set
  int32_t selected_tokens = 0;  // tokens of each set's blocks

  int32_t num_candidates() const { return window_begin - sink_end; }
  int32_t blocks_per_set() const { return sink_end + picks + (num_blocks - window_begin); }
};

// The block sets a layer picks in `mode` over a cache of `layout`: 1 (solohead) or one a KV head
// (headwise).
int32_t SelectionSets(SelectionMode mode, const PagedKvLayout& layout);

// BlockSelector::Partition for blocks of `block_tokens` tokens and `options`, which must be
// valid (as BlockSelector::Create checks), and num_tokens >= 0. The engine keeps a sequence's
// sinks and window resident by it.
BlockPartition PartitionBlocks(int32_t num_tokens, int32_t block_tokens,
                               const SelectionOptions& options);

// The logical blocks [begin, end) that an offloaded sequence decoding the token at `position`
// need not keep resident: past its sinks, before its window and before the block it writes.
struct BlockRange {
  int32_t begin = 0;
  int32_t end = 0;
};
BlockRange NonResidentBlocks(int32_t position, int32_t block_tokens,
                             const SelectionOptions& options);

// The blocks one step attends to: one set (solohead) or one per KV head (headwise) of
// partition.blocks_per_set() increasing logical blocks each, and the score each set gave each
// candidate (for score-aware eviction).
struct BlockSelection {
  BlockPartition partition;
  int32_t num_sets = 0;
  std::vector<int32_t> blocks = {};  // [num_sets][blocks_per_set]
  std::vector<float> scores = {};  // [num_sets][num_candidates]; candidate i is block sink_end + i

  std::span<const int32_t> set(int32_t index) const;
};

// Selection for one layer's shape and options. Immutable, so safe to share between threads.
class BlockSelector {
 public:
  // InvalidArgument for a layout that is not positive, num_query_heads that is not a positive
  // multiple of layout.num_kv_heads, negative token counts, or a logit scale that is not positive.
  static absl::StatusOr<BlockSelector> Create(const PagedKvLayout& layout, int32_t num_query_heads,
                                              const SelectionOptions& options);

  // The partition of a sequence of `num_tokens` tokens (num_tokens / T full blocks, then a tail of
  // num_tokens % T tokens). Sinks are the blocks holding tokens [0, sink_tokens); the window is
  // the blocks holding the last window_tokens tokens, and the partial tail block. Candidates are
  // full blocks, each costs T tokens, so the best `picks` of them are the best selection within
  // the budget; a budget >= num_tokens selects every block. InvalidArgument for num_tokens < 0.
  absl::StatusOr<BlockPartition> Partition(int32_t num_tokens) const;

  // Selects for a sequence of `num_tokens` tokens from `bounds`, [num_query_heads][candidates]
  // (ScoreBlocks over the candidate blocks of Partition(num_tokens), in order). Each set takes
  // its `picks` best-scoring candidates: the higher score first, the lower block among equals,
  // NaN after every number. InvalidArgument when `bounds` has the wrong size.
  absl::StatusOr<BlockSelection> Select(int32_t num_tokens, std::span<const float> bounds) const;
  // As Select, from the scores the bounds aggregate to, [num_sets()][candidates] (computed by
  // Backend::AggregateScores over Segment()). InvalidArgument when `scores` has the wrong size.
  absl::StatusOr<BlockSelection> SelectScored(int32_t num_tokens, std::vector<float> scores) const;

  // Score rows a selection has: 1 (solohead) or one a KV head (headwise).
  int32_t num_sets() const;
  // The ScoreSegment of a sequence whose `count` candidates are columns [first, first + count) of
  // a step's bounds, its scores going to scores_first onwards and its `picks` picks a set to
  // picks_first onwards.
  ScoreSegment Segment(int32_t first, int32_t count, int32_t scores_first, int32_t picks,
                       int32_t picks_first) const;

  const SelectionOptions& options() const { return options_; }
  int32_t num_query_heads() const { return num_query_heads_; }

 private:
  BlockSelector(const PagedKvLayout& layout, int32_t num_query_heads,
                const SelectionOptions& options, float logit_scale)
      : layout_(layout),
        num_query_heads_(num_query_heads),
        options_(options),
        logit_scale_(logit_scale) {}

  PagedKvLayout layout_;
  int32_t num_query_heads_ = 0;
  SelectionOptions options_;
  float logit_scale_ = 0.0f;
};

}  // namespace pulse
