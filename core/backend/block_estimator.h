// How a block's summary estimates a query's attention to the block (sparse decode selection):
// each KV head's keys of a block fall into `boxes` boxes of consecutive tokens, each box keeps
// the per-channel [min, max] of its keys shrunk around their midpoint to `radius`, and a query
// head's estimate for the block merges its boxes' bounds of q.k (at radius 1 Quest's upper bound,
// at radius 0 the box center's q.k) as `combine` says, by default the largest. One box a block is
// Quest's page summary; as many boxes as tokens scores every key exactly and keeps the block's
// best: the estimators between trade summary bytes for selection accuracy. Every backend stores a
// box's rows at `precision` (fp32, bf16, or int8 or int4 with a scale a row), laid out as
// SummaryBytes says.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/backend/paged_kv.h"
#include "core/base/status.h"

namespace pulse {

enum class SummaryPrecision : uint8_t { kF32, kBf16, kInt8, kInt4 };

// How a block's estimate for a query head follows from its boxes' bounds b_i.
enum class BoxCombine : uint8_t {
  // The largest: the block is as good as its best box (its best key, a box a token).
  kMax,
  // log(sum_i exp(s * b_i)) / s at the attention's scale s = 1 / sqrt(head_dim): with a box a
  // token, the logit whose softmax weight is the block's whole attention, so that the heads'
  // softmax over candidates (HeadAggregate::kSoftmaxSum) shares out attention mass rather than
  // best keys. Boxes whose bound is NaN count for nothing; NaN when every one is.
  kLogSumExp,
};

struct BlockEstimator {
  int32_t boxes = 1;    // divides the block's tokens; 0: one a token (as many as the block's)
  float radius = 0.0f;  // in [0, 1]
  SummaryPrecision precision = SummaryPrecision::kF32;
  BoxCombine combine = BoxCombine::kMax;
};

// The scale s of BoxCombine::kLogSumExp for keys of `head_dim` channels.
float LogSumExpScale(int32_t head_dim);

// `estimator` with its boxes for blocks of `block_tokens` (0 resolved to block_tokens).
BlockEstimator ForBlocks(BlockEstimator estimator, int32_t block_tokens);

// InvalidArgument, naming what is wrong, for boxes that do not divide layout's blocks, a radius
// outside [0, 1], an unknown precision, or int4 over an odd head_dim.
absl::Status ValidateEstimator(const BlockEstimator& estimator, const PagedKvLayout& layout);

// Rows a box keeps: 1 at radius 0 (its center; there the shrunk minimum and maximum are equal),
// 2 otherwise (its shrunk minimum, then its shrunk maximum).
int32_t SummaryBoxRows(const BlockEstimator& estimator);

// Bytes of one block's summary as every backend stores it. Its R = num_kv_heads * boxes *
// SummaryBoxRows rows of head_dim values are ordered [num_kv_heads][boxes][rows]; a value is an
// fp32, the bf16 bits of core/backend/bf16.h, an int8, or an int4, as `precision` says. An int4
// row packs two values a byte, head_dim / 2 bytes, channel 2j in the low half of byte j and 2j + 1
// in the high half. At int8 and int4 the R rows' values come first, then the R rows' fp32 scales
// in the same order (4-byte aligned in a summary whenever the values' bytes, R * head_dim at int8
// and R * head_dim / 2 at int4, are a multiple of 4), and value q of a row reads as q * scale
// (core/backend/summary_int.h says how rows are quantized and packed). Summaries lie back to
// back, summary i at i * SummaryBytes.
int64_t SummaryBytes(const PagedKvLayout& layout, const BlockEstimator& estimator);

// Whether rows stored at `precision` keep a scale each (int8 and int4).
constexpr bool HasRowScales(SummaryPrecision precision) {
  return precision == SummaryPrecision::kInt8 || precision == SummaryPrecision::kInt4;
}

// Where one summary's rows lie (SummaryBytes): `rows` rows of row_bytes each from its first byte,
// then, at int8 and int4, a 4-byte scale a row in the same order.
struct SummaryRowLayout {
  size_t rows;
  size_t row_bytes;

  size_t row_offset(size_t row) const { return row * row_bytes; }
  size_t scale_offset(size_t row) const { return rows * row_bytes + row * sizeof(float); }
};
SummaryRowLayout SummaryRows(const PagedKvLayout& layout, const BlockEstimator& estimator);

// Multiply-adds that scoring one block against one token's `num_heads` query heads takes from
// its stored summary: a product per channel of each box's row, two at a radius above 0.
int64_t ScoreMultiplyAdds(const PagedKvLayout& layout, const BlockEstimator& estimator,
                          int32_t num_heads);

// "box-r0", "boxes4-r0.5-bf16", "tokens-r0-int4" (a box a token, for any block size), with
// "-lse" last for BoxCombine::kLogSumExp ("tokens-r0-int4-lse"): what records and flags call it.
// ParseEstimator reads it back (InvalidArgument for anything else).
std::string EstimatorName(const BlockEstimator& estimator, int32_t block_tokens);
absl::StatusOr<BlockEstimator> ParseEstimator(std::string_view name);

}  // namespace pulse
