#include "core/backend/backend.h"

#include <limits>
#include <utility>

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

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

void DeviceBuffer::Reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->Free(data_, bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace pulse
