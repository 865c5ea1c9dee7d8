// Launchers of the Quest block-summary kernels of sparse decode attention (the CPU reference is
// core/backend/reference/block_summary.h). As in kernels.h, each enqueues its work on `stream` and
// returns the launch's error; the arrays are device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend/block_scores.h"
#include "core/backend/paged_kv.h"

namespace pulse::cuda {

// Floats in one block's summary: [num_kv_heads][2][head_dim], each KV head's per-channel key
// minimum row, then its maximum row.
inline int64_t BlockSummaryFloats(const PagedKvLayout& layout) {
  return 2 * int64_t{layout.num_kv_heads} * layout.head_dim;
}

// For i < count: the summary of the keys of every token of block block_ids[i] of `blocks` (one
// layer's bf16 cache of `layout`), written at summaries + summary_ids[i] * BlockSummaryFloats.
// NaN keys are skipped as fminf and fmaxf skip them; boxes shrink to `radius` as
// reference::SummarizeBlock's do, bit for bit; a negative block id is skipped. The summary_ids must
// be distinct. cudaErrorInvalidValue for a layout that is not bf16 with positive sizes, a negative
// count, or a radius outside [0, 1].
cudaError_t LaunchSummarizeBlocks(const void* blocks, const PagedKvLayout& layout,
                                  const int32_t* block_ids, const int32_t* summary_ids,
                                  int32_t count, float radius, float* summaries,
                                  cudaStream_t stream);

// For i < count and query head h < num_heads: bounds[h * count + i] = sum over d of
// max(q[d] * min[d], q[d] * max[d]), q the head's row at q + query_rows[i] * q_stride +
// h * head_dim and min, max the rows of KV head h / (num_heads / num_kv_heads) of the summary at
// summaries + summary_ids[i] * BlockSummaryFloats. cudaErrorInvalidValue for a layout without
// positive sizes, num_heads not a multiple of num_kv_heads, or a negative count.
cudaError_t LaunchScoreBlocks(const float* q, int64_t q_stride, int32_t num_heads,
                              const PagedKvLayout& layout, const float* summaries,
                              const int32_t* summary_ids, const int32_t* query_rows, int32_t count,
                              float* bounds, cudaStream_t stream);

// For each of the `num_segments` segments (device memory) and each of its sets: its scores from
// `bounds` ([num_heads][bound_stride]) as reference::AggregateHeadBounds computes them (softmax
// sums in double; the per-head totals are summed in another order, so a score may differ in its
// last bits). The segments must be valid as reference::AggregateScores checks; `max_sets`: at least
// every segment's num_sets. cudaErrorInvalidValue for num_heads outside [1, 128], max_sets outside
// [1, 65535], or a negative segment count.
inline constexpr int32_t kAggregateMaxHeads = 128;
cudaError_t LaunchAggregateScores(const float* bounds, int32_t num_heads, int64_t bound_stride,
                                  const ScoreSegment* segments, int32_t num_segments,
                                  int32_t max_sets, float* scores, cudaStream_t stream);

}  // namespace pulse::cuda
