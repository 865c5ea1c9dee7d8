// Paged KV append and causal GQA attention on the CPU.
#pragma once

#include <cstdint>

#include "core/backend/backend.h"
#include "core/backend/cpu/kernel_target.h"
#include "core/base/thread_pool.h"

PULSE_CPU_KERNELS_BEGIN

// As Backend::AppendKv: query row r of sequence s (position kv_lens[s] - q_len + i for its i-th
// row) goes to slot position % block_tokens of logical block position / block_tokens.
void AppendKv(const float* k, const float* v, int64_t row_stride, const PagedKvBatch& kv);

// As Backend::Attention. One work item per (query row, head); each item takes the scores of keys
// 0..position in order (each a Dot over head_dim), subtracts their max, and sums exp-weighted
// values in key order, so a row's output depends only on its own query and cached keys/values.
void Attention(ThreadPool& pool, const float* q, int64_t q_stride, int32_t num_heads,
               const PagedKvBatch& kv, float scale, float* out);

PULSE_CPU_KERNELS_END
