#include "core/backend/reference/block_summary.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/backend/bf16.h"
#include "core/backend/summary_int.h"
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

absl::Status CheckSize(const char* what, size_t size, int64_t expected, const char* unit) {
  if (static_cast<int64_t>(size) != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d %s; the layout needs %d", what, size, unit, expected));
  }
  return absl::OkStatus();
}

template <typename T>
T Load(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

template <typename T>
void Store(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof value);
}

// The scale of an integer row of `values` (summary_int.h).
template <int kLevels>
float RowScale(std::span<const float> values) {
  float largest = 0.0f;
  bool finite = true;
  for (const float value : values) {
    largest = std::fmax(largest, std::fabs(value));
    finite = finite && std::isfinite(value);
  }
  return IntRowScale<kLevels>(largest, finite);
}

// Stores `values` as row `row` of `summary` at `precision`.
void StoreRow(std::span<const float> values, const SummaryRowLayout& rows, size_t row,
              SummaryPrecision precision, std::span<std::byte> summary) {
  std::byte* out = summary.data() + rows.row_offset(row);
  switch (precision) {
    case SummaryPrecision::kF32:
      std::memcpy(out, values.data(), values.size_bytes());
      return;
    case SummaryPrecision::kBf16:
      for (size_t d = 0; d < values.size(); ++d) {
        Store(out + d * sizeof(uint16_t), F32ToBf16(values[d]));
      }
      return;
    case SummaryPrecision::kInt8: {
      const float scale = RowScale<kInt8Levels>(values);
      for (size_t d = 0; d < values.size(); ++d) {
        Store(out + d, QuantizeInt<kInt8Levels>(values[d], scale));
      }
      Store(summary.data() + rows.scale_offset(row), scale);
      return;
    }
    case SummaryPrecision::kInt4: {
      const float scale = RowScale<kInt4Levels>(values);
      for (size_t d = 0; d < values.size(); d += 2) {
        Store(out + d / 2, PackInt4(QuantizeInt<kInt4Levels>(values[d], scale),
                                    QuantizeInt<kInt4Levels>(values[d + 1], scale)));
      }
      Store(summary.data() + rows.scale_offset(row), scale);
      return;
    }
  }
}

// The values of row `row` of a summary stored at kPrecision, read in fp32.
template <SummaryPrecision kPrecision>
class RowReader {
 public:
  RowReader(std::span<const std::byte> summary, const SummaryRowLayout& rows, size_t row)
      : values_(summary.data() + rows.row_offset(row)) {
    if constexpr (HasRowScales(kPrecision)) {
      scale_ = Load<float>(summary.data() + rows.scale_offset(row));
    }
  }

  float operator[](size_t d) const {
    if constexpr (kPrecision == SummaryPrecision::kF32) {
      return Load<float>(values_ + d * sizeof(float));
    } else if constexpr (kPrecision == SummaryPrecision::kBf16) {
      return Bf16ToF32(Load<uint16_t>(values_ + d * sizeof(uint16_t)));
    } else if constexpr (kPrecision == SummaryPrecision::kInt8) {
      return DequantizeInt(Load<int8_t>(values_ + d), scale_);
    } else {
      const auto packed = Load<uint8_t>(values_ + d / 2);
      return DequantizeInt(d % 2 == 0 ? LowInt4(packed) : HighInt4(packed), scale_);
    }
  }

 private:
  const std::byte* values_;
  float scale_ = 1.0f;
};

// Row `row` of a summary stored at kPrecision, read in fp32 into out[d * stride] for d <
// head_dim.
template <SummaryPrecision kPrecision>
void ReadRow(std::span<const std::byte> summary, const SummaryRowLayout& rows, size_t row,
             size_t head_dim, float* out, size_t stride) {
  if constexpr (kPrecision == SummaryPrecision::kInt4) {
    // The row's sixteen values, each as DequantizeInt makes it, looked up by nibble.
    const std::byte* packed = summary.data() + rows.row_offset(row);
    const float scale = Load<float>(summary.data() + rows.scale_offset(row));
    float values[16];
    for (int nibble = 0; nibble < 16; ++nibble) {
      values[nibble] = DequantizeInt(LowInt4(static_cast<uint8_t>(nibble)), scale);
    }
    for (size_t d = 0; d < head_dim; d += 2) {
      const auto byte = static_cast<uint8_t>(packed[d / 2]);
      out[d * stride] = values[byte & 0x0F];
      out[(d + 1) * stride] = values[byte >> 4];
    }
  } else {
    const RowReader<kPrecision> reader(summary, rows, row);
    for (size_t d = 0; d < head_dim; ++d) out[d * stride] = reader[d];
  }
}

// Box i's bound (box_rows 1: sum over d of q[d] * lo[d]; 2: of max(q[d] * lo[d], q[d] * hi[d]),
// in channel order) for kBoxes consecutive boxes, whose values are values[d * stride + i]
// (lo) and values[(head_dim + d) * stride + i] (hi): the boxes' sums are independent chains
// kept in registers.
template <size_t kBoxes>
void BoxSums(const float* query, size_t head_dim, const float* values, size_t stride,
             int32_t box_rows, float* sums) {
  float acc[kBoxes] = {};
  if (box_rows == 1) {
    for (size_t d = 0; d < head_dim; ++d) {
      const float q = query[d];
      const float* lo = values + d * stride;
      for (size_t i = 0; i < kBoxes; ++i) acc[i] += q * lo[i];
    }
  } else {
    for (size_t d = 0; d < head_dim; ++d) {
      const float q = query[d];
      const float* lo = values + d * stride;
      const float* hi = lo + head_dim * stride;
      for (size_t i = 0; i < kBoxes; ++i) acc[i] += std::max(q * lo[i], q * hi[i]);
    }
  }
  std::copy(acc, acc + kBoxes, sums);
}

template <SummaryPrecision kPrecision>
void HeadBounds(const float* queries, int32_t group, size_t head_dim,
                std::span<const std::byte> summary, const SummaryRowLayout& rows, size_t first_row,
                int32_t boxes, int32_t box_rows, BoxCombine combine, float* bounds,
                int64_t bound_stride) {
  const auto num_boxes = static_cast<size_t>(boxes);
  // The head's rows in fp32, box-minor: values[(r * head_dim + d) * boxes + box] is value d of
  // row r of the box.
  thread_local std::vector<float> values;
  thread_local std::vector<float> sums;
  values.resize(static_cast<size_t>(box_rows) * head_dim * num_boxes);
  sums.resize(num_boxes);
  for (size_t box = 0; box < num_boxes; ++box) {
    for (int32_t r = 0; r < box_rows; ++r) {
      ReadRow<kPrecision>(summary, rows, first_row + box * box_rows + r, head_dim,
                          values.data() + static_cast<size_t>(r) * head_dim * num_boxes + box,
                          num_boxes);
    }
  }
  constexpr size_t kChunk = 8;
  const float scale = LogSumExpScale(static_cast<int32_t>(head_dim));
  for (int32_t h = 0; h < group; ++h) {
    const float* query = queries + static_cast<size_t>(h) * head_dim;
    size_t box = 0;
    for (; box + kChunk <= num_boxes; box += kChunk) {
      BoxSums<kChunk>(query, head_dim, values.data() + box, num_boxes, box_rows, &sums[box]);
    }
    for (; box < num_boxes; ++box) {
      BoxSums<1>(query, head_dim, values.data() + box, num_boxes, box_rows, &sums[box]);
    }
    bounds[h * bound_stride] = CombineBoxBounds(combine, scale, sums);
  }
}

}  // namespace

absl::Status SummarizeBlock(const PagedKvLayout& layout, const BlockEstimator& estimator,
                            std::span<const float> block, int32_t tokens,
                            std::span<std::byte> summary) {
  PULSE_RETURN_IF_ERROR(CheckLayout(layout));
  PULSE_RETURN_IF_ERROR(ValidateEstimator(estimator, layout));
  PULSE_RETURN_IF_ERROR(CheckSize("the block", block.size(), layout.block_elems(), "floats"));
  PULSE_RETURN_IF_ERROR(
      CheckSize("the summary", summary.size(), SummaryBytes(layout, estimator), "bytes"));
  if (tokens < 1 || tokens > layout.block_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot summarize %d tokens of a block of %d",
                                                      tokens, layout.block_tokens));
  }
  const auto head_dim = static_cast<size_t>(layout.head_dim);
  const int32_t box_tokens = layout.block_tokens / estimator.boxes;
  const int32_t box_rows = SummaryBoxRows(estimator);
  const SummaryRowLayout rows = SummaryRows(layout, estimator);
  std::vector<float> min(head_dim);
  std::vector<float> max(head_dim);
  for (int32_t head = 0; head < layout.num_kv_heads; ++head) {
    for (int32_t box = 0; box < estimator.boxes; ++box) {
      // A box past the tokens repeats the last box that has some.
      const int32_t first = std::min(box, (tokens - 1) / box_tokens) * box_tokens;
      const int32_t end = std::min(first + box_tokens, tokens);
      const std::span<const float> keys = block.subspan(
          static_cast<size_t>(head * layout.head_elems() + int64_t{first} * layout.head_dim),
          static_cast<size_t>(end - first) * head_dim);
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
      const size_t row = (static_cast<size_t>(head) * estimator.boxes + box) * box_rows;
      StoreRow(min, rows, row, estimator.precision, summary);
      if (box_rows == 2) StoreRow(max, rows, row + 1, estimator.precision, summary);
    }
  }
  return absl::OkStatus();
}

float BlockBound(const PagedKvLayout& layout, const BlockEstimator& estimator,
                 std::span<const float> query, std::span<const std::byte> summary,
                 int32_t kv_head) {
  assert(static_cast<int64_t>(query.size()) == layout.head_dim);
  float bound = 0.0f;
  GroupBounds(layout, estimator, query.data(), 1, summary, kv_head, &bound, 0);
  return bound;
}

void GroupBounds(const PagedKvLayout& layout, const BlockEstimator& estimator, const float* queries,
                 int32_t group, std::span<const std::byte> summary, int32_t kv_head, float* bounds,
                 int64_t bound_stride) {
  assert(static_cast<int64_t>(summary.size()) == SummaryBytes(layout, estimator) && kv_head >= 0 &&
         kv_head < layout.num_kv_heads && group >= 1);
  const SummaryRowLayout rows = SummaryRows(layout, estimator);
  const int32_t box_rows = SummaryBoxRows(estimator);
  const size_t first_row = static_cast<size_t>(kv_head) * estimator.boxes * box_rows;
  const auto head_dim = static_cast<size_t>(layout.head_dim);
  switch (estimator.precision) {
    case SummaryPrecision::kBf16:
      return HeadBounds<SummaryPrecision::kBf16>(queries, group, head_dim, summary, rows, first_row,
                                                 estimator.boxes, box_rows, estimator.combine,
                                                 bounds, bound_stride);
    case SummaryPrecision::kInt8:
      return HeadBounds<SummaryPrecision::kInt8>(queries, group, head_dim, summary, rows, first_row,
                                                 estimator.boxes, box_rows, estimator.combine,
                                                 bounds, bound_stride);
    case SummaryPrecision::kInt4:
      return HeadBounds<SummaryPrecision::kInt4>(queries, group, head_dim, summary, rows, first_row,
                                                 estimator.boxes, box_rows, estimator.combine,
                                                 bounds, bound_stride);
    case SummaryPrecision::kF32:
      break;
  }
  HeadBounds<SummaryPrecision::kF32>(queries, group, head_dim, summary, rows, first_row,
                                     estimator.boxes, box_rows, estimator.combine, bounds,
                                     bound_stride);
}

absl::Status ScoreBlocks(const PagedKvLayout& layout, const BlockEstimator& estimator,
                         std::span<const float> query, std::span<const std::byte> summaries,
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
  const auto summary_bytes = static_cast<size_t>(SummaryBytes(layout, estimator));
  if (summaries.size() % summary_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d bytes of summaries are not summaries of %d bytes", summaries.size(), summary_bytes));
  }
  PULSE_RETURN_IF_ERROR(CheckSize("the bounds", bounds.size(),
                                  int64_t(num_query_heads * block_ids.size()), "floats"));
  const auto num_summaries = static_cast<int64_t>(summaries.size() / summary_bytes);
  for (const int32_t id : block_ids) {
    if (id < 0 || id >= num_summaries) {
      return absl::InvalidArgumentError(
          absl::StrFormat("block %d has no summary: there are %d", id, num_summaries));
    }
  }
  const size_t group = num_query_heads / num_kv_heads;
  for (size_t i = 0; i < block_ids.size(); ++i) {
    const std::span<const std::byte> summary =
        summaries.subspan(static_cast<size_t>(block_ids[i]) * summary_bytes, summary_bytes);
    for (size_t kv_head = 0; kv_head < num_kv_heads; ++kv_head) {
      GroupBounds(layout, estimator, query.data() + kv_head * group * head_dim,
                  static_cast<int32_t>(group), summary, static_cast<int32_t>(kv_head),
                  bounds.data() + kv_head * group * block_ids.size() + i,
                  static_cast<int64_t>(block_ids.size()));
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

absl::Status DrawSyntheticScores(std::span<const int32_t> summary_ids,
                                 std::span<const ScoreSegment> segments, int32_t step,
                                 const SyntheticPicks& picks, int32_t layer,
                                 std::span<float> scores) {
  if (picks.period_q < 1024) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "synthetic picks of period %d / 1024 steps: below one step", picks.period_q));
  }
  for (const ScoreSegment& segment : segments) {
    if (segment.first < 0 || segment.count < 0 ||
        segment.first + segment.count > static_cast<int64_t>(summary_ids.size()) ||
        segment.num_sets <= 0 || segment.scores_first < 0 ||
        segment.scores_first + int64_t{segment.num_sets} * segment.count >
            static_cast<int64_t>(scores.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "score segment of %d candidates from %d in %d sets, to %d: outside %d summary ids or "
          "%d scores",
          segment.count, segment.first, segment.num_sets, segment.scores_first, summary_ids.size(),
          scores.size()));
    }
    for (int32_t set = 0; set < segment.num_sets; ++set) {
      float* out = scores.data() + segment.scores_first + int64_t{set} * segment.count;
      for (int32_t i = 0; i < segment.count; ++i) {
        out[i] = SyntheticScore(picks, summary_ids[segment.first + i], layer, set, step);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pulse::reference
