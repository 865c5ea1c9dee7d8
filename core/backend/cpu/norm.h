// Hugging Face RMSNorm on the CPU: y = weight * (x * (1 / sqrt(mean(x^2) + eps))), with the sum of
// squares in the fixed Dot order (lanes.h).
#pragma once

#include <cstdint>

#include "core/backend/cpu/kernel_target.h"
#include "core/base/thread_pool.h"

PULSE_CPU_KERNELS_BEGIN

void RmsNorm(ThreadPool& pool, const float* x, const float* weight, int64_t rows, int64_t cols,
             float eps, float* y);

// residual += x, then y = RmsNorm(residual); y may be x.
void AddRmsNorm(ThreadPool& pool, float* residual, const float* x, const float* weight,
                int64_t rows, int64_t cols, float eps, float* y);

PULSE_CPU_KERNELS_END
