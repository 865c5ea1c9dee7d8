// The CPU backend's kernels compiled for one instruction-set level (cpu_level.h): the backend
// takes one table when it is made and calls every op through it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/backend/backend.h"
#include "core/backend/block_estimator.h"
#include "core/backend/cpu/cpu_level.h"
#include "core/base/thread_pool.h"

namespace pulse::cpu {

// Each entry is the function of the same name in gemm.h, norm.h, rope.h, pointwise.h,
// attention.h or block_bounds.h, compiled for the table's level.
struct CpuKernels {
  void (*embed)(ThreadPool& pool, const MatrixView& table, int64_t first_row, const int32_t* tokens,
                int64_t count, float* out);
  void (*gemm)(ThreadPool& pool, const float* x, int64_t m, const MatrixView& w, const float* bias,
               float* y);
  void (*rms_norm)(ThreadPool& pool, const float* x, const float* weight, int64_t rows,
                   int64_t cols, float eps, float* y);
  void (*add_rms_norm)(ThreadPool& pool, float* residual, const float* x, const float* weight,
                       int64_t rows, int64_t cols, float eps, float* y);
  void (*rope)(ThreadPool& pool, float* x, int64_t rows, int64_t row_stride, int32_t num_heads,
               int32_t head_dim, const int32_t* positions, const float* inv_freq);
  void (*swiglu)(ThreadPool& pool, const float* gate_up, int64_t m, int64_t inter, float* out);
  void (*gather_rows)(const float* x, int64_t cols, const int32_t* rows, int64_t count, float* out);
  void (*append_kv)(const float* k, const float* v, int64_t row_stride, const PagedKvBatch& kv);
  void (*attention)(ThreadPool& pool, const float* q, int64_t q_stride, int32_t num_heads,
                    const PagedKvBatch& kv, float scale, float* out);
  void (*score_blocks)(ThreadPool& pool, const float* q, int64_t q_stride, int32_t num_heads,
                       const PagedKvLayout& layout, const BlockEstimator& estimator,
                       const std::byte* summaries, const int32_t* summary_ids,
                       const int32_t* query_rows, int32_t count, float* bounds);
};

// The kernels of `level` (kBest: ResolveCpuLevel's); `level` must be supported.
const CpuKernels& CpuKernelsFor(CpuLevel level);

// Each level's table, defined by kernel_table.cc compiled for that level.
const CpuKernels& GenericCpuKernels();
const CpuKernels& Avx2CpuKernels();
const CpuKernels& Avx512CpuKernels();

}  // namespace pulse::cpu
