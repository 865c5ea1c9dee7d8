// Block bounds for sparse decode selection on the CPU (Backend::ScoreBlocks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/backend/block_estimator.h"
#include "core/backend/cpu/kernel_target.h"
#include "core/backend/paged_kv.h"
#include "core/base/thread_pool.h"

PULSE_CPU_KERNELS_BEGIN

// As Backend::ScoreBlocks, with reference::GroupBounds's bits at every level: a box's sum is
// the reference's chain (channel order, each product and each addition rounded on its own) run in
// a vector lane of its own, the lanes being the boxes of a few candidates that share a query row,
// and the boxes combine through reference::CombineBoxBounds. A row's 4-byte words are gathered
// across the lanes at 32-bit offsets from `summaries`, so a head_dim whose rows do not split into
// whole words (int4 and a head_dim not a multiple of 8, int8 of 4, bf16 of 2), or a call naming a
// summary past 2 GiB of them, is scored by the reference itself.
void ScoreBlocks(ThreadPool& pool, const float* q, int64_t q_stride, int32_t num_heads,
                 const PagedKvLayout& layout, const BlockEstimator& estimator,
                 const std::byte* summaries, const int32_t* summary_ids, const int32_t* query_rows,
                 int32_t count, float* bounds);

PULSE_CPU_KERNELS_END
