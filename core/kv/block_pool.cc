#include "core/kv/block_pool.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace pulse {

BlockPool::BlockPool(int32_t capacity)
    : capacity_(std::max(capacity, 0)), is_allocated_(static_cast<size_t>(capacity_), false) {
  free_.reserve(static_cast<size_t>(capacity_));
  // Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2...
  for (int32_t block = capacity_ - 1; block >= 0; --block) free_.push_back(block);
}

absl::Status BlockPool::Reserve(int32_t count) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot reserve %d KV blocks", count));
  }
  if (count > available()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot reserve %d KV blocks: %d of %d are available", count, available(), capacity_));
  }
  reserved_ += count;
  return absl::OkStatus();
}

absl::Status BlockPool::Unreserve(int32_t count) {
  if (count < 0 || count > reserved_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot unreserve %d KV blocks: %d are reserved", count, reserved_));
  }
  reserved_ -= count;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> BlockPool::Allocate() {
  if (reserved_ == 0) {
    return absl::FailedPreconditionError("cannot allocate a KV block: none is reserved");
  }
  const int32_t block = free_.back();
  free_.pop_back();
  is_allocated_[static_cast<size_t>(block)] = true;
  --reserved_;
  return block;
}

absl::Status BlockPool::Free(int32_t block) {
  if (block < 0 || block >= capacity_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block %d is out of range [0, %d)", block, capacity_));
  }
  if (!is_allocated_[static_cast<size_t>(block)]) {
    return absl::InvalidArgumentError(absl::StrFormat("KV block %d is not allocated", block));
  }
  is_allocated_[static_cast<size_t>(block)] = false;
  free_.push_back(block);
  return absl::OkStatus();
}

}  // namespace pulse
