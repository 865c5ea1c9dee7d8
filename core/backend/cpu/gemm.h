// y = x * w^T (+ bias) on the CPU: cache-blocked, vectorized over k, split over threads by tiles.
#pragma once

#include <cstdint>

#include "core/backend/backend.h"
#include "core/backend/cpu/kernel_target.h"
#include "core/base/thread_pool.h"

PULSE_CPU_KERNELS_BEGIN

// x [m][w.cols], y [m][w.rows], bias [w.rows] or null; every element of y is one Dot-order sum
// (lanes.h) over w.cols, so rows are independent of m, of each other, and of the split. Q8_0, Q4_0
// and Q4_1 weights are read as the GGUF reader decodes them (block_lanes.h); Q4_K and Q6_K go to
// KQuantGemm (kquant_gemm.h), whose rows are independent too.
void Gemm(ThreadPool& pool, const float* x, int64_t m, const MatrixView& w, const float* bias,
          float* y);

PULSE_CPU_KERNELS_END
