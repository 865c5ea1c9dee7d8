// The block cache of one layer's device tier: which host blocks are resident in which of its
// `num_slots` slots, shared by every request of the layer. Selected blocks stay resident across
// steps until a miss needs their slot; the EvictionPolicy picks which evictable block leaves.
//
// A resident block is evictable unless it is
// - pinned (Pin/Unpin, counted): sinks, the recent window, a tail block still being written or not
//   yet written back to the host tier;
// - in use: hit by Lookup or acquired since the last EndStep(). A step's attention reads every
//   block the step selected, so one of them must not be evicted to make room for another: the
//   whole batch's selection of the layer is resident at once. The engine calls EndStep() when the
//   slots the step read may be overwritten.
// Misses are only counted here: the caller recalls the block into the slot Acquire gives. Nothing
// is written back on eviction (KV is immutable once written to the host tier).
//
// Not thread-safe: the engine serializes calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/base/status.h"
#include "core/kv/eviction_policy.h"

namespace pulse {

struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;

  friend bool operator==(const CacheStats&, const CacheStats&) = default;
};

struct SlotGrant {
  int32_t slot = 0;
  std::optional<int32_t> evicted;  // the block that held the slot, when one did
};

class DeviceSlotCache {
 public:
  // `num_slots` slots for host blocks numbered [0, num_blocks).
  DeviceSlotCache(int32_t num_slots, int32_t num_blocks, std::unique_ptr<EvictionPolicy> policy);

  // The slot holding `block`, counting a hit or a miss for `request_id`. A hit is in use until
  // EndStep().
  std::optional<int32_t> Lookup(int32_t block, uint64_t request_id);
  // Makes `block` resident for its request `request_id`, in a free slot, else in the slot of the
  // evictable block the policy ranks lowest (an eviction, counted for that block's request). The
  // block is in use until EndStep(); its score starts at +infinity (a block not yet scored is a
  // forced one: kept until a score says otherwise). InvalidArgument for a block id outside
  // [0, num_blocks), AlreadyExists when it is resident, ResourceExhausted when every slot is pinned
  // or in use; nothing changes then.
  absl::StatusOr<SlotGrant> Acquire(int32_t block, uint64_t request_id);

  // NotFound when `block` is not resident; Unpin: FailedPrecondition when it is not pinned.
  absl::Status Pin(int32_t block);
  absl::Status Unpin(int32_t block);

  // Records `block`'s latest selection score (NaN counts as -infinity), the score-aware policy's
  // rank. Ignored when `block` is not resident.
  void NoteScore(int32_t block, float score);

  // Frees the slot of `block`, pinned or not (its request ended). OK when `block` is not
  // resident; FailedPrecondition, changing nothing, while it is in use.
  absl::Status Forget(int32_t block);
  // Forgets every block of `request_id` and drops its counters, which it returns.
  // FailedPrecondition, changing nothing, while one of its blocks is in use.
  absl::StatusOr<CacheStats> ForgetRequest(uint64_t request_id);

  // Ends the step: no block is in use any more.
  void EndStep();

  int32_t num_slots() const { return static_cast<int32_t>(slots_.size()); }
  int32_t num_blocks() const { return static_cast<int32_t>(slot_of_block_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_slots_.size()); }
  int32_t num_evictable() const { return num_evictable_; }
  std::optional<int32_t> slot_of(int32_t block) const;
  // The block in `slot`, nullopt when the slot is free.
  std::optional<CachedBlock> block_in(int32_t slot) const;
  int32_t pins(int32_t block) const;  // 0 when not resident
  bool in_use(int32_t block) const;

  const CacheStats& stats() const { return stats_; }
  CacheStats request_stats(uint64_t request_id) const;

 private:
  struct Slot {
    std::optional<CachedBlock> block = std::nullopt;
    int32_t pins = 0;
    bool in_use = false;
    EvictionRank rank = {};  // its key in evictable_, while evictable
  };

  static bool Evictable(const Slot& slot) {
    return slot.block.has_value() && slot.pins == 0 && !slot.in_use;
  }
  // Whether a slot is in the recency list: resident and unpinned, in use or not.
  static bool Listed(const Slot& slot) { return slot.block.has_value() && slot.pins == 0; }
  // Applies `change` to a slot, keeping the eviction order (evictable_ or the recency list),
  // num_evictable_ and in_use_slots_ in step with it.
  template <typename Change>
  void Update(int32_t slot, Change change);
  // The victim: the lowest-ranked evictable slot. Only while num_evictable_ > 0.
  int32_t Victim() const;
  void Free(int32_t slot);
  // slot_of_block_[block], or -1 for an id out of range.
  int32_t SlotIndex(int32_t block) const {
    return block >= 0 && static_cast<size_t>(block) < slot_of_block_.size()
               ? slot_of_block_[static_cast<size_t>(block)]
               : -1;
  }
  // Whether slot a leaves before slot b: the lower (rank, slot).
  bool Before(int32_t a, int32_t b) const;
  // evictable_ as a binary min-heap under Before, heap_index_ kept in step.
  void HeapInsert(int32_t slot);
  void HeapRemove(int32_t slot);
  void HeapFix(int32_t index);  // the entry at `index` changed its rank
  void HeapPlace(int32_t index, int32_t slot);
  // The recency list, by_recency_ only: listed slots by last_use, oldest first. A use sets the
  // newest last_use, so the slots in use this step are its tail: the head is evictable whenever
  // any listed slot is.
  void ListInsert(int32_t slot);  // at its last_use's place, found from the tail
  void ListRemove(int32_t slot);

  std::unique_ptr<EvictionPolicy> policy_;
  const bool by_recency_;  // the policy ranks by last_use alone: the list, not the heap
  std::vector<Slot> slots_;
  std::vector<int32_t> free_slots_;  // a stack; a fresh cache hands out slots 0, 1, 2...
  // The slot of each host block, -1 when it is not resident.
  std::vector<int32_t> slot_of_block_;
  // Without by_recency_, the evictable slots as a binary min-heap under Before whose top is the
  // victim: a use, a score or a step's end costs a sift of the slot's entry (O(log slots)).
  std::vector<int32_t> evictable_;
  std::vector<int32_t> heap_index_;  // [slot]: its place in evictable_; -1 while not evictable
  std::vector<int32_t> list_prev_;   // [slot], by_recency_: the recency list's links, -1 at ends
  std::vector<int32_t> list_next_;
  int32_t list_head_ = -1;
  int32_t list_tail_ = -1;
  int32_t num_evictable_ = 0;
  std::vector<int32_t> in_use_slots_;
  uint64_t use_clock_ = 0;
  CacheStats stats_;
  absl::flat_hash_map<uint64_t, CacheStats> request_stats_;
};

}  // namespace pulse
