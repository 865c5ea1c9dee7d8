#include "core/backend/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "core/backend/cpu/lanes.h"

PULSE_CPU_KERNELS_BEGIN
namespace {

// Rows per ParallelFor range: enough elements that waking a worker pays off.
int64_t RowGrain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

void NormRow(const float* x, const float* weight, int64_t cols, float eps, float* y) {
  const float mean_square = Dot(x, x, cols) / static_cast<float>(cols);
  const float inv_rms = 1.0f / std::sqrt(mean_square + eps);
  for (int64_t c = 0; c < cols; ++c) y[c] = weight[c] * (x[c] * inv_rms);
}

}  // namespace

void RmsNorm(ThreadPool& pool, const float* x, const float* weight, int64_t rows, int64_t cols,
             float eps, float* y) {
  pool.ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) NormRow(x + r * cols, weight, cols, eps, y + r * cols);
  });
}

void AddRmsNorm(ThreadPool& pool, float* residual, const float* x, const float* weight,
                int64_t rows, int64_t cols, float eps, float* y) {
  pool.ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* res = residual + r * cols;
      const float* in = x + r * cols;
      for (int64_t c = 0; c < cols; ++c) res[c] += in[c];
      NormRow(res, weight, cols, eps, y + r * cols);
    }
  });
}

PULSE_CPU_KERNELS_END
