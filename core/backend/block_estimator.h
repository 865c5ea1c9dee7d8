// How a block's summary estimates a query's attention to the block (sparse decode selection):
// each KV head's keys of a block fall into `boxes` boxes of consecutive tokens, each box keeps
// the per-channel [min, max] of its keys shrunk around their midpoint to `radius`, and a query
// head's estimate for the block is the largest over its boxes of the box's bound of q.k (at
// radius 1 Quest's upper bound, at radius 0 the box center's q.k). One box a block is Quest's
// page summary; as many boxes as tokens scores every key exactly and keeps the block's best:
// the estimators between trade summary bytes for selection accuracy. Every backend stores a box's
// rows at `precision` (fp32, bf16, or int8 or int4 with a scale a row), laid out as SummaryBytes
// says.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/backend/paged_kv.h"
#include "core/base/status.h"

namespace pulse {

enum class SummaryPrecision : uint8_t { kF32, kBf16, kInt8, kInt4 };

struct BlockEstimator {
  int32_t boxes = 1;    // divides the block's tokens; 0: one a token (as many as the block's)
  float radius = 0.0f;  // in [0, 1]
  SummaryPrecision precision = SummaryPrecision::kF32;
};

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

// Multiply-adds that scoring one block against one token's `num_heads` query heads takes from
// its stored summary: a product per channel of each box's row, two at a radius above 0.
int64_t ScoreMultiplyAdds(const PagedKvLayout& layout, const BlockEstimator& estimator,
                          int32_t num_heads);

// "box-r0", "boxes4-r0.5-bf16", "tokens-r0-int4" (a box a token, for any block size): what
// records and flags call it. ParseEstimator reads it back (InvalidArgument for anything else).
std::string EstimatorName(const BlockEstimator& estimator, int32_t block_tokens);
absl::StatusOr<BlockEstimator> ParseEstimator(std::string_view name);

}  // namespace pulse
