// The free list of one paged KV cache's block ids. Blocks are handed out only against a
// reservation, so a sequence that reserved its worst case up front can never run out while it
// runs, and can never take blocks another sequence reserved. Not thread-safe: the owner (the
// engine) serializes calls.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"

namespace pulse {

class BlockPool {
 public:
  explicit BlockPool(int32_t capacity);

  int32_t capacity() const { return capacity_; }
  int32_t allocated() const { return capacity_ - static_cast<int32_t>(free_.size()); }
  int32_t reserved() const { return reserved_; }
  // Blocks neither allocated nor reserved: what a new reservation can still take.
  int32_t available() const { return static_cast<int32_t>(free_.size()) - reserved_; }

  // Sets `count` free blocks aside for later Allocate calls. ResourceExhausted when fewer than
  // `count` are available; InvalidArgument for a negative count.
  absl::Status Reserve(int32_t count);
  // Returns `count` reserved, never allocated blocks to the pool.
  absl::Status Unreserve(int32_t count);
  // Hands out one reserved block (the reservation shrinks by one). FailedPrecondition when
  // nothing is reserved.
  absl::StatusOr<int32_t> Allocate();
  // Returns an allocated block. InvalidArgument for an id out of range or not allocated (a
  // double free), so a block is never handed out twice.
  absl::Status Free(int32_t block);

 private:
  const int32_t capacity_;
  std::vector<int32_t> free_;       // a stack: the most recently freed block is reused first
  std::vector<bool> is_allocated_;  // [capacity]
  int32_t reserved_ = 0;
};

}  // namespace pulse
