#include "core/backend/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

PULSE_CPU_KERNELS_BEGIN

void Rope(ThreadPool& pool, float* x, int64_t rows, int64_t row_stride, int32_t num_heads,
          int32_t head_dim, const int32_t* positions, const float* inv_freq) {
  const int32_t half = head_dim / 2;
  const int64_t grain =
      std::max<int64_t>(1, 16384 / std::max<int64_t>(1, int64_t{num_heads} * head_dim));
  pool.ParallelFor(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> cos(half);
    std::vector<float> sin(half);
    for (int64_t r = begin; r < end; ++r) {
      for (int32_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(positions[r]) * static_cast<double>(inv_freq[i]);
        cos[i] = static_cast<float>(std::cos(angle));
        sin[i] = static_cast<float>(std::sin(angle));
      }
      for (int32_t h = 0; h < num_heads; ++h) {
        float* x1 = x + r * row_stride + int64_t{h} * head_dim;
        float* x2 = x1 + half;
        for (int32_t i = 0; i < half; ++i) {
          const float a = x1[i];
          const float b = x2[i];
          x1[i] = a * cos[i] - b * sin[i];
          x2[i] = b * cos[i] + a * sin[i];
        }
      }
    }
  });
}

PULSE_CPU_KERNELS_END
