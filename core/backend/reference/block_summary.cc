#include "core/backend/reference/block_summary.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/backend/bf16.h"
#include "core/backend/summary_radius.h"

namespace pulse::reference {
namespace {

absl::Status CheckLayout(const PagedKvLayout& layout) {
  if (layout.type != DType::kF32 || layout.block_tokens <= 0 || layout.num_kv_heads <= 0 ||
      layout.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "block summaries of %s blocks of %d tokens x %d heads x %d dims", DTypeName(layout.type),
        layout.block_tokens, layout.num_kv_heads, layout.head_dim));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(const char* what, size_t size, int64_t expected) {
  if (static_cast<int64_t>(size) != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d floats; the layout needs %d", what, size, expected));
  }
  return absl::OkStatus();
}

// Rounds `values` as a store of `precision` keeps them: bf16 to nearest even; int8 to the nearest
// of 255 levels spaced by the row's largest magnitude / 127.
void RoundToPrecision(std::span<float> values, SummaryPrecision precision) {
  if (precision == SummaryPrecision::kBf16) {
    for (float& value : values) value = Bf16ToF32(F32ToBf16(value));
    return;
  }
  if (precision != SummaryPrecision::kInt8) return;
  float largest = 0.0f;
  for (const float value : values) largest = std::fmax(largest, std::fabs(value));
  if (!(largest > 0.0f) || std::isinf(largest)) return;
  const float scale = largest / 127.0f;
  for (float& value : values) value = std::nearbyint(value / scale) * scale;
}

}  // namespace

absl::Status SummarizeBlock(const PagedKvLayout& layout, const BlockEstimator& estimator,
                            std::span<const float> block, int32_t tokens,
                            std::span<float> summary) {
  PULSE_RETURN_IF_ERROR(CheckLayout(layout));
  PULSE_RETURN_IF_ERROR(ValidateEstimator(estimator, layout));
  PULSE_RETURN_IF_ERROR(CheckSize("the block", block.size(), layout.block_elems()));
  PULSE_RETURN_IF_ERROR(CheckSize("the summary", summary.size(), SummaryElems(layout, estimator)));
  if (tokens < 1 || tokens > layout.block_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot summarize %d tokens of a block of %d",
                                                      tokens, layout.block_tokens));
  }
  const auto head_dim = static_cast<size_t>(layout.head_dim);
  const int32_t box_tokens = layout.block_tokens / estimator.boxes;
  for (int32_t head = 0; head < layout.num_kv_heads; ++head) {
    for (int32_t box = 0; box < estimator.boxes; ++box) {
      // A box past the tokens repeats the last box that has some.
      const int32_t first = std::min(box, (tokens - 1) / box_tokens) * box_tokens;
      const int32_t end = std::min(first + box_tokens, tokens);
      const std::span<const float> keys = block.subspan(
          static_cast<size_t>(head * layout.head_elems() + int64_t{first} * layout.head_dim),
          static_cast<size_t>(end - first) * head_dim);
      const size_t row = (static_cast<size_t>(head) * estimator.boxes + box) * 2 * head_dim;
      const std::span<float> min = summary.subspan(row, head_dim);
      const std::span<float> max = summary.subspan(row + head_dim, head_dim);
      std::copy_n(keys.begin(), head_dim, min.begin());
      std::copy_n(keys.begin(), head_dim, max.begin());
      for (size_t t = 1; t < static_cast<size_t>(end - first); ++t) {
        const std::span<const float> key = keys.subspan(t * head_dim, head_dim);
        for (size_t d = 0; d < head_dim; ++d) {
          min[d] = std::fmin(min[d], key[d]);
          max[d] = std::fmax(max[d], key[d]);
        }
      }
      if (estimator.radius != 1.0f) {
        for (size_t d = 0; d < head_dim; ++d) ShrinkToRadius(min[d], max[d], estimator.radius);
      }
      for (const std::span<float> values : {min, max})
        RoundToPrecision(values, estimator.precision);
    }
  }
  return absl::OkStatus();
}

float BlockBound(std::span<const float> query, std::span<const float> head_summary) {
  const size_t head_dim = query.size();
  assert(head_dim > 0 && head_summary.size() % (2 * head_dim) == 0);
  // NaN unless some box's bound is a number (fmax keeps the number).
  float best = std::numeric_limits<float>::quiet_NaN();
  for (size_t row = 0; row < head_summary.size(); row += 2 * head_dim) {
    float bound = 0.0f;
    for (size_t d = 0; d < head_dim; ++d) {
      bound +=
          std::max(query[d] * head_summary[row + d], query[d] * head_summary[row + head_dim + d]);
    }
    best = std::fmax(best, bound);
  }
  return best;
}

absl::Status ScoreBlocks(const PagedKvLayout& layout, const BlockEstimator& estimator,
                         std::span<const float> query, std::span<const float> summaries,
                         std::span<const int32_t> block_ids, std::span<float> bounds) {
  PULSE_RETURN_IF_ERROR(CheckLayout(layout));
  PULSE_RETURN_IF_ERROR(ValidateEstimator(estimator, layout));
  const size_t head_dim = static_cast<size_t>(layout.head_dim);
  const size_t num_query_heads = query.size() / head_dim;
  const size_t num_kv_heads = static_cast<size_t>(layout.num_kv_heads);
  if (num_query_heads == 0 || query.size() % head_dim != 0 || num_query_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a query of %d floats is not query heads of %d dims over %d KV heads",
                        query.size(), head_dim, num_kv_heads));
  }
  const int64_t summary_elems = SummaryElems(layout, estimator);
  if (summaries.size() % summary_elems != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d floats of summaries are not summaries of %d floats", summaries.size(), summary_elems));
  }
  PULSE_RETURN_IF_ERROR(
      CheckSize("the bounds", bounds.size(), int64_t(num_query_heads * block_ids.size())));
  const int64_t num_summaries = static_cast<int64_t>(summaries.size()) / summary_elems;
  for (const int32_t id : block_ids) {
    if (id < 0 || id >= num_summaries) {
      return absl::InvalidArgumentError(
          absl::StrFormat("block %d has no summary: there are %d", id, num_summaries));
    }
  }
  const size_t group = num_query_heads / num_kv_heads;
  const size_t head_elems = static_cast<size_t>(summary_elems) / num_kv_heads;
  for (size_t i = 0; i < block_ids.size(); ++i) {
    const std::span<const float> summary =
        summaries.subspan(block_ids[i] * summary_elems, summary_elems);
    for (size_t head = 0; head < num_query_heads; ++head) {
      bounds[head * block_ids.size() + i] =
          BlockBound(query.subspan(head * head_dim, head_dim),
                     summary.subspan((head / group) * head_elems, head_elems));
    }
  }
  return absl::OkStatus();
}

void AggregateHeadBounds(HeadAggregate aggregate, float logit_scale, const float* bounds,
                         int64_t stride, int32_t num_heads, std::span<float> scores) {
  const size_t count = scores.size();
  switch (aggregate) {
    case HeadAggregate::kMax:
      std::fill(scores.begin(), scores.end(), -std::numeric_limits<float>::infinity());
      for (int32_t head = 0; head < num_heads; ++head) {
        const float* row = bounds + head * stride;
        for (size_t i = 0; i < count; ++i) {
          // A NaN bound, once met, stays the score.
          if (!std::isnan(scores[i]) && !(row[i] <= scores[i])) scores[i] = row[i];
        }
      }
      return;
    case HeadAggregate::kSoftmaxSum: {
      if (count == 0) return;
      std::vector<double> sums(count, 0.0);
      std::vector<double> weights(count);
      for (int32_t head = 0; head < num_heads; ++head) {
        const float* row = bounds + head * stride;
        const double max_logit = double{logit_scale} * *std::max_element(row, row + count);
        double total = 0.0;
        for (size_t i = 0; i < count; ++i) {
          weights[i] = std::exp(double{logit_scale} * row[i] - max_logit);
          total += weights[i];
        }
        for (size_t i = 0; i < count; ++i) sums[i] += weights[i] / total;
      }
      std::copy(sums.begin(), sums.end(), scores.begin());
      return;
    }
  }
}

absl::Status AggregateScores(std::span<const float> bounds, int32_t num_heads,
                             std::span<const ScoreSegment> segments, std::span<float> scores) {
  if (num_heads <= 0 || bounds.size() % static_cast<size_t>(num_heads) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bounds are not rows of %d heads", bounds.size(), num_heads));
  }
  const auto stride = static_cast<int64_t>(bounds.size()) / num_heads;
  for (const ScoreSegment& segment : segments) {
    if (segment.first < 0 || segment.count < 0 || segment.first + segment.count > stride ||
        segment.num_sets <= 0 || num_heads % segment.num_sets != 0 || segment.scores_first < 0 ||
        segment.scores_first + int64_t{segment.num_sets} * segment.count >
            static_cast<int64_t>(scores.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "score segment of %d candidates from %d in %d sets, to %d: outside %d bounds a head "
          "of %d heads or %d scores",
          segment.count, segment.first, segment.num_sets, segment.scores_first, stride, num_heads,
          scores.size()));
    }
    const int32_t heads_per_set = num_heads / segment.num_sets;
    for (int32_t set = 0; set < segment.num_sets; ++set) {
      AggregateHeadBounds(
          segment.aggregate, segment.logit_scale,
          bounds.data() + int64_t{set} * heads_per_set * stride + segment.first, stride,
          heads_per_set,
          scores.subspan(segment.scores_first + static_cast<size_t>(set) * segment.count,
                         segment.count));
    }
  }
  return absl::OkStatus();
}

}  // namespace pulse::reference
