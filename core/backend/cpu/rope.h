// Rotary position embedding (rotate-half convention) on the CPU.
#pragma once

#include <cstdint>

#include "core/backend/cpu/kernel_target.h"
#include "core/base/thread_pool.h"

PULSE_CPU_KERNELS_BEGIN

// As Backend::Rope. cos and sin of double(positions[r]) * double(inv_freq[i]) are computed in
// double and rounded to float; then x1' = x1 * cos - x2 * sin and x2' = x2 * cos + x1 * sin.
void Rope(ThreadPool& pool, float* x, int64_t rows, int64_t row_stride, int32_t num_heads,
          int32_t head_dim, const int32_t* positions, const float* inv_freq);

PULSE_CPU_KERNELS_END
