// y = x * w^T (+ bias) on the CPU for weights kept in the K-quants Q4_K and Q6_K (256-value
// super-blocks), read as stored: a decode step reads a seventh to a fifth of the bytes of fp32
// weights.
//
// Each row of x is first quantized as ggml's q8 activations are: a block of 32 values gets the
// scale d = max|x| / 127 and the integers round(x / d). A super-block is read as eight 32-value
// blocks, and an output is the weight row's and the x row's 32-value blocks multiplied as
// integers, exactly, in eight lanes of four values each (lane l: values 4l..4l+3), each lane's
// integer sum times the block's d_w * d_x fused-multiply-added to that lane's float sum block
// after block (even blocks into one set of eight lanes, odd ones into another: the AVX-512 kernel
// takes blocks in pairs); the two sets added lane by lane, the lanes by one fixed tree; then, for
// Q4_K, the sum over blocks of the minimum times d_x times the block's integer sum of x. A Q4_K
// block's d_w is d * sc and its minimum -dmin * m; a Q6_K block has two 16-value sub-blocks, so
// lanes 0-3 take d * scales[2j] and lanes 4-7 d * scales[2j + 1]. That order depends on the
// shapes only, so every kernel level gives the same bits, and a row's outputs depend on that row
// alone.
#pragma once

#include <cstdint>

#include "core/backend/backend.h"
#include "core/backend/cpu/cpu_level.h"
#include "core/base/thread_pool.h"

namespace pulse::cpu {

// x [m][w.cols], y [m][w.rows], bias [w.rows] or null; w of type Q4_K or Q6_K with cols a
// multiple of 256. `level` must be supported (CpuLevelSupported): kGeneric runs the scalar
// kernel, kAvx512 the AVX-512 VNNI one.
void KQuantGemm(ThreadPool& pool, const float* x, int64_t m, const MatrixView& w, const float* bias,
                float* y, CpuLevel level = CpuLevel::kBest);

}  // namespace pulse::cpu
