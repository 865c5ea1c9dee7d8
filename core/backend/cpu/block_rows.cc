#include "core/backend/cpu/block_rows.h"

#include <cstddef>

#include "core/base/ggml_blocks.h"

namespace pulse::cpu {

void DecodeBlockRow(DType type, const void* row, int64_t cols, float* out) {
  const auto* blocks = static_cast<const std::byte*>(row);
  const int64_t block_bytes = BlockTypeBytes(type);
  const int64_t block_values = BlockTypeValues(type);
  for (int64_t b = 0; b < cols / block_values; ++b) {
    const std::byte* block = blocks + b * block_bytes;
    float* values = out + b * block_values;
    switch (type) {
      case DType::kQ8_0:
        DecodeQ8_0(block, values);
        break;
      case DType::kQ4_0:
        DecodeQ4_0(block, values);
        break;
      case DType::kQ4_K:
        DecodeQ4_K(block, values);
        break;
      case DType::kQ6_K:
        DecodeQ6_K(block, values);
        break;
      default:
        DecodeQ4_1(block, values);
        break;
    }
  }
}

}  // namespace pulse::cpu
