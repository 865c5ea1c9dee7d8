#include "core/backend/backend.h"

#include <limits>

#include "absl/strings/str_format.h"

namespace pulse {

std::string_view DTypeName(DType type) {
  switch (type) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_1:
      return "q4_1";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ6_K:
      return "q6_k";
  }
  return "unknown";
}

absl::StatusOr<size_t> WeightBytes(std::span<const float> values, int64_t rows, int64_t cols,
                                   DType type) {
  if (rows < 0 || cols < 0 || (cols != 0 && rows > std::numeric_limits<int64_t>::max() / cols)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("UploadWeight: invalid shape [%d][%d]", rows, cols));
  }
  const int64_t count = rows * cols;
  if (static_cast<size_t>(count) != values.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "UploadWeight: shape [%d][%d] needs %d values, got %u", rows, cols, count, values.size()));
  }
  const size_t element_bytes = DTypeBytes(type);
  if (element_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "UploadWeight: %s is a block type (UploadBlocks keeps blocks)", DTypeName(type)));
  }
  if (static_cast<size_t>(count) > std::numeric_limits<size_t>::max() / element_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("UploadWeight: [%d][%d] is too large", rows, cols));
  }
  return static_cast<size_t>(count) * element_bytes;
}

absl::StatusOr<Weight> Backend::UploadBlocks(std::span<const std::byte> /*blocks*/,
                                             int64_t /*rows*/, int64_t /*cols*/, DType type) {
  return absl::UnimplementedError(
      absl::StrFormat("the %s backend keeps no %s weights", name(), DTypeName(type)));
}

absl::Status CheckWeightBlocks(std::span<const std::byte> blocks, int64_t rows, int64_t cols,
                               DType type) {
  const int64_t block_values = BlockTypeValues(type);
  if (block_values == 0 || rows < 0 || cols < 0 || cols % block_values != 0 ||
      (cols != 0 && rows > std::numeric_limits<int64_t>::max() / cols)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "UploadBlocks: a [%d][%d] weight of %s (block types: q8_0, q4_0, q4_1 with cols a "
        "multiple of 32; q4_k, q6_k with cols a multiple of 256)",
        rows, cols, DTypeName(type)));
  }
  const int64_t bytes = rows * BlockRowBytes(type, cols);
  if (static_cast<size_t>(bytes) != blocks.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("UploadBlocks: a [%d][%d] weight of %s is %d bytes, got %u", rows, cols,
                        DTypeName(type), bytes, blocks.size()));
  }
  return absl::OkStatus();
}

}  // namespace pulse
