// Launchers of the Quest block-summary kernels of sparse decode attention (the CPU reference is
// core/backend/reference/block_summary.h). As in kernels.h, each enqueues its work on `stream` and
// returns the launch's error; the arrays are device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend/block_estimator.h"
#include "core/backend/block_scores.h"
#include "core/backend/paged_kv.h"

namespace pulse::cuda {

// For i < count: the summary under `estimator` (core/backend/block_estimator.h) of the keys of
// block block_ids[i] of `blocks` (one layer's bf16 cache of `layout`), stored as SummaryBytes
// lays it out at summaries + summary_ids[i] * SummaryBytes bytes: per KV head and box, the
// channels' minimum and maximum (NaN keys skipped as fminf and fmaxf skip them), shrunk to the
// radius (the center alone at radius 0) and stored at the precision as reference::SummarizeBlock
// does, the same values bit for bit; a negative block id is skipped. The summary_ids must be
// distinct. cudaErrorInvalidValue for a layout that is not bf16 with positive sizes, an
// estimator that does not fit it, or a negative count.
cudaError_t LaunchSummarizeBlocks(const void* blocks, const PagedKvLayout& layout,
                                  const BlockEstimator& estimator, const int32_t* block_ids,
                                  const int32_t* summary_ids, int32_t count, void* summaries,
                                  cudaStream_t stream);

// For i < count and query head h < num_heads: bounds[h * count + i] = the largest over the boxes
// of KV head h / (num_heads / num_kv_heads) of the summary at summaries + summary_ids[i] *
// SummaryBytes bytes of the sum over d of q[d] * center[d] at radius 0, else of max(q[d] *
// min[d], q[d] * max[d]), the stored values read in fp32 and q the head's row at q +
// query_rows[i] * q_stride + h * head_dim. cudaErrorInvalidValue for a layout without positive
// sizes, an estimator that does not fit it, num_heads not a multiple of num_kv_heads, or a
// negative count.
cudaError_t LaunchScoreBlocks(const float* q, int64_t q_stride, int32_t num_heads,
                              const PagedKvLayout& layout, const BlockEstimator& estimator,
                              const void* summaries, const int32_t* summary_ids,
                              const int32_t* query_rows, int32_t count, float* bounds,
                              cudaStream_t stream);

// For each of the `num_segments` segments (device memory) and each of its sets: its scores from
// `bounds` ([num_heads][bound_stride]) as reference::AggregateHeadBounds computes them (softmax
// sums in double; the per-head totals are summed in another order, so a score may differ in its
// last bits). The segments must be valid as reference::AggregateScores checks; `max_sets`: at least
// every segment's num_sets. `head_stats` is device scratch of AggregateScoresScratchDoubles
// doubles (each segment's heads' softmax maximum and total, computed first by a block a head).
// cudaErrorInvalidValue for num_heads outside [1, 128], max_sets outside [1, 65535], or a
// segment count outside [0, 65535].
inline constexpr int32_t kAggregateMaxHeads = 128;
int64_t AggregateScoresScratchDoubles(int32_t num_heads, int32_t num_segments);
cudaError_t LaunchAggregateScores(const float* bounds, int32_t num_heads, int64_t bound_stride,
                                  const ScoreSegment* segments, int32_t num_segments,
                                  int32_t max_sets, double* head_stats, float* scores,
                                  cudaStream_t stream);

// For each of the `num_segments` segments (device memory) and each of its sets: its scores drawn
// as reference::DrawSyntheticScores draws them (the same bits), at the step `*step` (device
// memory). The segments must be valid as it checks. cudaErrorInvalidValue for max_sets outside
// [1, 65535], a negative segment count or a period below 1024.
cudaError_t LaunchDrawSyntheticScores(const int32_t* summary_ids, const ScoreSegment* segments,
                                      int32_t num_segments, int32_t max_sets, const int32_t* step,
                                      const SyntheticPicks& picks, int32_t layer, float* scores,
                                      cudaStream_t stream);

}  // namespace pulse::cuda
