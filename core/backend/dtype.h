// Element types of backend memory, and ggml's block types (32 values a block, or a K-quant's 256,
// core/base/ggml_blocks.h) that a backend may keep weights in. Math always accumulates in fp32.
// (C++17: kernels include it.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/backend/host_device.h"
#include "core/base/ggml_blocks.h"

namespace pulse {

enum class DType : uint8_t { kF32, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ4_K, kQ6_K };

std::string_view DTypeName(DType type);

// Bytes of an element; 0 for a block type.
PULSE_HOST_DEVICE constexpr size_t DTypeBytes(DType type) {
  return type == DType::kBF16 ? 2 : (type == DType::kF32 ? 4 : 0);
}

constexpr bool IsBlockType(DType type) { return type != DType::kF32 && type != DType::kBF16; }

// Values of a block of a block type (a row holds whole blocks); 0 for an element type.
constexpr int64_t BlockTypeValues(DType type) {
  return !IsBlockType(type)                             ? 0
         : type == DType::kQ4_K || type == DType::kQ6_K ? kGgmlSuperBlockValues
                                                        : kGgmlBlockValues;
}

// Bytes of a block (BlockTypeValues values) of a block type; 0 for an element type.
constexpr int64_t BlockTypeBytes(DType type) {
  return type == DType::kQ8_0   ? kQ8_0BlockBytes
         : type == DType::kQ4_0 ? kQ4_0BlockBytes
         : type == DType::kQ4_1 ? kQ4_1BlockBytes
         : type == DType::kQ4_K ? kQ4_KBlockBytes
         : type == DType::kQ6_K ? kQ6_KBlockBytes
                                : 0;
}

// Bytes of a row of `cols` values (whole blocks) of block type `type`.
constexpr int64_t BlockRowBytes(DType type, int64_t cols) {
  return cols / BlockTypeValues(type) * BlockTypeBytes(type);
}

}  // namespace pulse
