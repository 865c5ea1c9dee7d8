// Quest's summary of a paged KV block: per KV head, the per-channel minimum and maximum of the
// block's keys, from which an upper bound of any query's dot product with any key of the block
// follows. Selection ranks blocks by that bound. A summary may also keep a narrower box around
// each channel's midpoint (the summary radius): its "bound" is then an estimate of q.k, the
// box's center's q.k at radius 0, which picks better blocks than the bound (the accuracy report,
// samples/bench/results/README.md, "Offload accuracy"). The reference math: the CPU backend
// runs it, the selection policy ranks by it, and the CUDA kernels are tested against it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "core/backend/block_estimator.h"
#include "core/backend/block_scores.h"
#include "core/backend/paged_kv.h"
#include "core/base/status.h"

namespace pulse::reference {

// Writes into `summary` (SummaryBytes(layout, estimator) bytes, laid out as SummaryBytes says)
// the summary of the keys of the first `tokens` tokens of `block`, one fp32 block of `layout` (the
// tokens after them are not read): for each KV head and box (block_tokens / boxes consecutive
// tokens), the channels' minimum and maximum over the box's keys, a NaN channel skipped as fminf
// and fmaxf skip it; a box past `tokens` repeats the last box with tokens. With a radius below 1
// each channel's range shrinks around its midpoint as ShrinkToRadius does (summary_radius.h); at
// radius 0 the box keeps the shrunk minimum alone, its center. Each row is stored at the
// estimator's precision: bf16 rounded to nearest even (F32ToBf16), int8 and int4 as
// summary_int.h quantizes and packs them. InvalidArgument for a layout that is not fp32 or not
// positive, an estimator that does not fit it, spans whose sizes do not match, or `tokens` outside
// [1, block_tokens].
absl::Status SummarizeBlock(const PagedKvLayout& layout, const BlockEstimator& estimator,
                            std::span<const float> block, int32_t tokens,
                            std::span<std::byte> summary);

// A block's estimate for one query head from its boxes' bounds, as `combine` says (BoxCombine,
// in double at kLogSumExp); `scale` is LogSumExpScale's. The largest bound is fmaxf's over them:
// NaN when every bound is (of two zeros, either). The CPU kernels combine through it too, so that
// they give the reference's bits (inline, so that a kernel's scoring loop keeps it in line).
inline float CombineBoxBounds(BoxCombine combine, float scale, std::span<const float> box_bounds) {
  // The largest bound that is a number (what a chain of fmaxf gives, without calling it a box):
  // a NaN compares false and is passed over, and four running maxima keep the compares from
  // being one chain. NaN when no bound is a number.
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  float largest[4] = {kNone, kNone, kNone, kNone};
  size_t i = 0;
  for (; i + 4 <= box_bounds.size(); i += 4) {
    for (size_t j = 0; j < 4; ++j) {
      largest[j] = box_bounds[i + j] > largest[j] ? box_bounds[i + j] : largest[j];
    }
  }
  for (; i < box_bounds.size(); ++i) {
    largest[0] = box_bounds[i] > largest[0] ? box_bounds[i] : largest[0];
  }
  float best = std::max(std::max(largest[0], largest[1]), std::max(largest[2], largest[3]));
  if (best == kNone && std::ranges::none_of(box_bounds, [](float b) { return b == kNone; })) {
    best = std::numeric_limits<float>::quiet_NaN();
  }
  if (combine == BoxCombine::kMax || !std::isfinite(best)) return best;
  double total = 0;
  for (const float bound : box_bounds) {
    if (!std::isnan(bound)) total += std::exp(double{scale} * (double{bound} - double{best}));
  }
  return static_cast<float>(double{best} + std::log(total) / double{scale});
}

// The estimate of q.k (`query`: head_dim floats) over the keys that KV head `kv_head` of one
// block's `summary` (as SummarizeBlock writes it) covers: the largest over the head's boxes of
// the box's bound, the sum over d of query[d] * center[d] at radius 0, else of max(query[d] *
// min[d], query[d] * max[d]), each row value read in fp32 (NaN only when every box's bound is).
// The sums run in channel order.
float BlockBound(const PagedKvLayout& layout, const BlockEstimator& estimator,
                 std::span<const float> query, std::span<const std::byte> summary, int32_t kv_head);
// BlockBound for `group` query heads at once (`queries`: [group][head_dim]), each head's into
// bounds[h * bound_stride]: the same sums in the same order, so the same bits, with every box's
// rows read once for the group and the boxes' sums run side by side.
void GroupBounds(const PagedKvLayout& layout, const BlockEstimator& estimator, const float* queries,
                 int32_t group, std::span<const std::byte> summary, int32_t kv_head, float* bounds,
                 int64_t bound_stride);

// The bounds of every query head over the blocks `block_ids`: bounds[h][i] is query head h's
// BlockBound over block block_ids[i], whose summary is the block_ids[i]-th of `summaries`.
// `query` is [num_query_heads][head_dim]; query head h reads KV head h / (num_query_heads /
// num_kv_heads), as attention does. InvalidArgument for sizes that do not fit the layout or a
// block id outside `summaries`.
absl::Status ScoreBlocks(const PagedKvLayout& layout, const BlockEstimator& estimator,
                         std::span<const float> query, std::span<const std::byte> summaries,
                         std::span<const int32_t> block_ids, std::span<float> bounds);

// scores[i] for i < scores.size(): `aggregate` (with `logit_scale`, block_scores.h) over
// num_heads heads of their bounds on candidate i, head h's at bounds[h * stride + i]. Softmax sums
// are taken in double, head by head.
void AggregateHeadBounds(HeadAggregate aggregate, float logit_scale, const float* bounds,
                         int64_t stride, int32_t num_heads, std::span<float> scores);

// Every segment's scores (ScoreSegment) from a step's bounds, [num_heads][bound_stride].
// InvalidArgument for a segment outside the bounds or the scores, or whose num_sets does not
// divide num_heads.
absl::Status AggregateScores(std::span<const float> bounds, int32_t num_heads,
                             std::span<const ScoreSegment> segments, std::span<float> scores);

// Every segment's scores drawn (Backend::DrawSyntheticScores) for its candidates' `summary_ids`.
// InvalidArgument for a segment outside the summary ids or the scores, or a period below 1024.
absl::Status DrawSyntheticScores(std::span<const int32_t> summary_ids,
                                 std::span<const ScoreSegment> segments, int32_t step,
                                 const SyntheticPicks& picks, int32_t layer,
                                 std::span<float> scores);

}  // namespace pulse::reference
