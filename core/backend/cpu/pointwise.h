// Row copies and element-wise ops on the CPU.
#pragma once

#include <cstdint>

#include "core/backend/backend.h"
#include "core/backend/cpu/kernel_target.h"
#include "core/base/thread_pool.h"

PULSE_CPU_KERNELS_BEGIN

// out[i] = table row tokens[i] - first_row as fp32, or -0.0 where the table has no such row
// (Backend::Embed).
void Embed(ThreadPool& pool, const MatrixView& table, int64_t first_row, const int32_t* tokens,
           int64_t count, float* out);

// out[m][inter] = silu(gate_up[m][0:inter]) * gate_up[m][inter:2*inter], silu(g) = g / (1 + e^-g)
// with e^x from exp.h.
void SwiGlu(ThreadPool& pool, const float* gate_up, int64_t m, int64_t inter, float* out);

// out[i] = x row rows[i].
void GatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t count, float* out);

PULSE_CPU_KERNELS_END
