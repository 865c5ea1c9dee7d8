#include "core/kv/block_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace pulse {

BlockPool::BlockPool(int32_t capacity, bool track_released)
    : capacity_(std::max(capacity, 0)),
      track_released_(track_released),
      blocks_(static_cast<size_t>(capacity_)) {
  free_.reserve(static_cast<size_t>(capacity_));
  // Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2...
  for (int32_t block = capacity_ - 1; block >= 0; --block) free_.push_back(block);
}

int32_t BlockPool::IdsToHold(int32_t more) const {
  // Allocations take the freed ids below fresh_ first, then fresh ones; cached unreferenced
  // blocks (below fresh_ too) only once no id is free.
  const int64_t reusable = static_cast<int64_t>(free_.size()) - (capacity_ - fresh_);
  const int64_t fresh_needed = std::max<int64_t>(0, int64_t{reserved_} + more - reusable);
  return static_cast<int32_t>(std::min<int64_t>(capacity_, fresh_ + fresh_needed));
}

int32_t BlockPool::holders(int32_t block) const {
  return block >= 0 && block < capacity_ ? blocks_[static_cast<size_t>(block)].holders : 0;
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
  int32_t block = 0;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    // A reservation counts the unreferenced cached blocks: one is there.
    block = unreferenced_.front();
    Uncache(block);
  }
  blocks_[static_cast<size_t>(block)].holders = 1;
  fresh_ = std::max(fresh_, block + 1);
  --reserved_;
  return block;
}

absl::Status BlockPool::Free(int32_t block) {
  if (block < 0 || block >= capacity_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block %d is out of range [0, %d)", block, capacity_));
  }
  Block& entry = blocks_[static_cast<size_t>(block)];
  if (entry.holders == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("KV block %d is not allocated", block));
  }
  if (--entry.holders > 0) return absl::OkStatus();
  if (track_released_) released_.push_back(block);
  if (entry.key) {
    entry.unreferenced = unreferenced_.insert(unreferenced_.end(), block);
  } else {
    free_.push_back(block);
  }
  return absl::OkStatus();
}

absl::Status BlockPool::Share(int32_t block) {
  if (block < 0 || block >= capacity_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block %d is out of range [0, %d)", block, capacity_));
  }
  Block& entry = blocks_[static_cast<size_t>(block)];
  if (entry.holders > 0) {
    ++entry.holders;
    return absl::OkStatus();
  }
  if (!entry.key) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block %d is neither held nor cached: nothing to share", block));
  }
  if (available() < 1) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot take cached KV block %d back: every block is held or reserved", block));
  }
  unreferenced_.erase(entry.unreferenced);
  entry.holders = 1;
  return absl::OkStatus();
}

bool BlockPool::Cache(int32_t block, BlockKey key) {
  if (block < 0 || block >= capacity_) return false;
  Block& entry = blocks_[static_cast<size_t>(block)];
  if (entry.holders == 0 || entry.key || by_hash_.contains(key.hash)) return false;
  by_hash_.emplace(key.hash, block);
  entry.key = std::move(key);
  return true;
}

std::optional<int32_t> BlockPool::Find(const BlockKey& key) const {
  const auto it = by_hash_.find(key.hash);
  if (it == by_hash_.end() || *blocks_[static_cast<size_t>(it->second)].key != key) {
    return std::nullopt;
  }
  return it->second;
}

std::vector<int32_t> BlockPool::TakeReleased() { return std::exchange(released_, {}); }

void BlockPool::Uncache(int32_t block) {
  Block& entry = blocks_[static_cast<size_t>(block)];
  unreferenced_.erase(entry.unreferenced);
  by_hash_.erase(entry.key->hash);
  entry.key.reset();
}

}  // namespace pulse
