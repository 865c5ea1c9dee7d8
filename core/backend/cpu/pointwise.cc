#include "core/backend/cpu/pointwise.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/backend/cpu/block_rows.h"
#include "core/backend/cpu/exp.h"
#include "core/backend/cpu/lanes.h"

PULSE_CPU_KERNELS_BEGIN
namespace {

int64_t RowGrain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

template <typename T>
void EmbedRows(ThreadPool& pool, const MatrixView& table, const int32_t* tokens, int64_t count,
               float* out) {
  const T* data = static_cast<const T*>(table.data);
  const int64_t cols = table.cols;
  pool.ParallelFor(count, RowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      assert(tokens[i] >= 0 && tokens[i] < table.rows);
      const T* row = data + int64_t{tokens[i]} * cols;
      for (int64_t c = 0; c < cols; ++c) out[i * cols + c] = ToF32(row[c]);
    }
  });
}

}  // namespace

void Embed(ThreadPool& pool, const MatrixView& table, const int32_t* tokens, int64_t count,
           float* out) {
  switch (table.type) {
    case DType::kF32:
      EmbedRows<float>(pool, table, tokens, count, out);
      return;
    case DType::kBF16:
      EmbedRows<uint16_t>(pool, table, tokens, count, out);
      return;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
    case DType::kQ6_K: {
      const int64_t row_bytes = BlockRowBytes(table.type, table.cols);
      const auto* rows = static_cast<const std::byte*>(table.data);
      pool.ParallelFor(count, RowGrain(table.cols), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          assert(tokens[i] >= 0 && tokens[i] < table.rows);
          DecodeBlockRow(table.type, rows + int64_t{tokens[i]} * row_bytes, table.cols,
                         out + i * table.cols);
        }
      });
      return;
    }
  }
}

void SwiGlu(ThreadPool& pool, const float* gate_up, int64_t m, int64_t inter, float* out) {
  pool.ParallelFor(m, RowGrain(inter), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* gate = gate_up + r * 2 * inter;
      const float* up = gate + inter;
      float* y = out + r * inter;
      for (int64_t i = 0; i < inter; ++i) y[i] = gate[i] / (1.0f + Exp(-gate[i])) * up[i];
    }
  });
}

void GatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t count, float* out) {
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(float);
  for (int64_t i = 0; i < count; ++i) {
    assert(rows[i] >= 0);
    std::memcpy(out + i * cols, x + int64_t{rows[i]} * cols, row_bytes);
  }
}

PULSE_CPU_KERNELS_END
