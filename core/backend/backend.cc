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
  if (static_cast<size_t>(count) > std::numeric_limits<size_t>::max() / element_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("UploadWeight: [%d][%d] is too large", rows, cols));
  }
  return static_cast<size_t>(count) * element_bytes;
}

}  // namespace pulse
