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

// Calls write(i, table_row) for each token i the table holds; fills the others' rows with -0.0.
template <typename WriteRow>
void EmbedRows(ThreadPool& pool, const MatrixView& table, int64_t first_row, const int32_t* tokens,
               int64_t count, float* out, WriteRow write) {
  const int64_t cols = table.cols;
  pool.ParallelFor(count, RowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = tokens[i] - first_row;
      if (row >= 0 && row < table.rows) {
        write(i, row);
      } else {
        std::fill(out + i * cols, out + (i + 1) * cols, -0.0f);
      }
    }
  });
}

}  // namespace

void Embed(ThreadPool& pool, const MatrixView& table, int64_t first_row, const int32_t* tokens,
           int64_t count, float* out) {
  const int64_t cols = table.cols;
  const auto values = [&]<typename T>(const T* data) {
    EmbedRows(pool, table, first_row, tokens, count, out, [&](int64_t i, int64_t row) {
      for (int64_t c = 0; c < cols; ++c) out[i * cols + c] = ToF32(data[row * cols + c]);
    });
  };
  switch (table.type) {
    case DType::kF32:
      values(static_cast<const float*>(table.data));
      return;
    case DType::kBF16:
      values(static_cast<const uint16_t*>(table.data));
      return;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
    case DType::kQ6_K: {
      const int64_t row_bytes = BlockRowBytes(table.type, cols);
      const auto* rows = static_cast<const std::byte*>(table.data);
      EmbedRows(pool, table, first_row, tokens, count, out, [&](int64_t i, int64_t row) {
        DecodeBlockRow(table.type, rows + row * row_bytes, cols, out + i * cols);
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
