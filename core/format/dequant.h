// ggml tensor types and their dequantization to fp32, bit-exact with ggml's reference
// dequantize_row_* functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/base/ggml_blocks.h"  // IWYU pragma: export (HalfToFloat, Bf16ToFloat)
#include "core/base/status.h"

namespace pulse {

// Values as ggml numbers them (ggml.h `enum ggml_type`); the gaps are types ggml removed.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

// The type numbered `value`, or InvalidArgument naming the number when ggml has no such type.
absl::StatusOr<GgmlType> GgmlTypeFromNumber(uint32_t value);
// ggml's name of the type: "F32", "Q4_1", "Q6_K", "BF16"...
std::string_view GgmlTypeName(GgmlType type);
// Elements per block (1 for F32/F16/BF16, 32 for Q8_0, 256 for K-quants...).
int64_t GgmlBlockElements(GgmlType type);
// Bytes per block.
int64_t GgmlBlockBytes(GgmlType type);
// Whether Dequantize supports the type.
bool CanDequantize(GgmlType type);

// Bytes that `elements` values of `type` occupy; InvalidArgument when `elements` is negative,
// not a whole number of blocks, or the byte count overflows int64.
absl::StatusOr<int64_t> TensorBytes(GgmlType type, int64_t elements);

// Decodes `src` (exactly TensorBytes(type, dst.size()) bytes) into `dst`.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K; others give Unimplemented naming the
// type; a size mismatch gives InvalidArgument.
absl::Status Dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst);

}  // namespace pulse
