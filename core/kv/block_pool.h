// The free list of one paged KV cache's block ids. Blocks are handed out only against a
// reservation, so a sequence that reserved its worst case up front can never run out while it
// runs, and can never take blocks another sequence reserved. Not thread-safe: the owner (the
// engine) serializes calls.
//
// Prefix caching (the host tier's pool): a block may have several holders (Share), and is freed
// with its last (Free). A block named with Cache is instead kept once its last holder lets it
// go, unreferenced, for Share to take back by its key (Find), until an allocation needs its
// room: unreferenced cached blocks count as available, and Allocate takes the least recently
// released of them when no block is free. A referenced block is never taken.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/base/status.h"
#include "core/kv/block_key.h"

namespace pulse {

class BlockPool {
 public:
  // `track_released`: keep the list TakeReleased returns.
  explicit BlockPool(int32_t capacity, bool track_released = false);

  int32_t capacity() const { return capacity_; }
  // Blocks not free: held, or cached unreferenced.
  int32_t allocated() const { return capacity_ - static_cast<int32_t>(free_.size()); }
  int32_t reserved() const { return reserved_; }
  // Blocks neither held nor reserved: what a new reservation can still take.
  int32_t available() const {
    return static_cast<int32_t>(free_.size() + unreferenced_.size()) - reserved_;
  }
  // Cached blocks, and those of them no one holds.
  int32_t cached() const { return static_cast<int32_t>(by_hash_.size()); }
  int32_t cached_unreferenced() const { return static_cast<int32_t>(unreferenced_.size()); }
  // The least n such that ids [0, n) hold every block held or cached now and every block the
  // reservations and `more` blocks past them may take: a fresh pool hands out ids in increasing
  // order and reuses freed ones first.
  int32_t IdsToHold(int32_t more) const;
  // Holders of `block` (0 when free or cached unreferenced).
  int32_t holders(int32_t block) const;

  // Sets `count` available blocks aside for later Allocate calls. ResourceExhausted when fewer
  // than `count` are available; InvalidArgument for a negative count.
  absl::Status Reserve(int32_t count);
  // Returns `count` reserved, never allocated blocks to the pool.
  absl::Status Unreserve(int32_t count);
  // Hands out one reserved block with one holder (the reservation shrinks by one): a free one,
  // else the least recently released cached one, which leaves the cache. FailedPrecondition
  // when nothing is reserved.
  absl::StatusOr<int32_t> Allocate();
  // One holder of `block` lets it go; with the last it is freed, or kept unreferenced when
  // cached. InvalidArgument for an id out of range or with no holder (a double free), so a
  // block is never handed out twice.
  absl::Status Free(int32_t block);

  // One more holder of a held block, or the first of a cached unreferenced one (which takes one
  // available block). InvalidArgument for a free block; ResourceExhausted, changing nothing,
  // when a cached unreferenced block is taken back and nothing is available.
  absl::Status Share(int32_t block);
  // Names held `block` as the KV of `key`. False, changing nothing, when the key has a block
  // already or this block has a key.
  bool Cache(int32_t block, BlockKey key);
  // The cached block of `key`, held or not.
  std::optional<int32_t> Find(const BlockKey& key) const;
  // With track_released, the blocks whose last holder let them go since the last call (freed or
  // cached): what the caller keeps about them (a device slot holding one) may not be valid for
  // their next holder.
  std::vector<int32_t> TakeReleased();

 private:
  struct Block {
    int32_t holders = 0;
    std::optional<BlockKey> key;
    std::list<int32_t>::iterator unreferenced;  // its place there, when cached with no holder
  };

  // Takes cached unreferenced `block` out of the cache: it is then neither free nor held.
  void Uncache(int32_t block);

  const int32_t capacity_;
  const bool track_released_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::vector<Block> blocks_;  // [capacity]
  int32_t reserved_ = 0;
  int32_t fresh_ = 0;                               // ids handed out at least once: [0, fresh_)
  absl::flat_hash_map<uint64_t, int32_t> by_hash_;  // the cached blocks, held or not
  std::list<int32_t> unreferenced_;                 // least recently released first
  std::vector<int32_t> released_;
};

}  // namespace pulse
