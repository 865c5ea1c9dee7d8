#include "core/kv/device_slot_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace pulse {

DeviceSlotCache::DeviceSlotCache(int32_t num_slots, int32_t num_blocks,
                                 std::unique_ptr<EvictionPolicy> policy)
    : policy_(std::move(policy)),
      by_recency_(policy_->RanksByRecency()),
      slots_(static_cast<size_t>(std::max(num_slots, 0))),
      slot_of_block_(static_cast<size_t>(std::max(num_blocks, 0)), -1),
      heap_index_(slots_.size(), -1),
      list_prev_(slots_.size(), -1),
      list_next_(slots_.size(), -1) {
  free_slots_.reserve(slots_.size());
  for (int32_t slot = this->num_slots() - 1; slot >= 0; --slot) free_slots_.push_back(slot);
}

template <typename Change>
void DeviceSlotCache::Update(int32_t slot, Change change) {
  Slot& state = slots_[static_cast<size_t>(slot)];
  const bool was_evictable = Evictable(state);
  const bool was_in_use = state.in_use;
  const bool was_listed = Listed(state);
  const uint64_t last_use = state.block.has_value() ? state.block->last_use : 0;
  change(state);
  if (!was_in_use && state.in_use) in_use_slots_.push_back(slot);
  const bool evictable = Evictable(state);
  num_evictable_ += static_cast<int32_t>(evictable) - static_cast<int32_t>(was_evictable);
  if (by_recency_) {
    const bool listed = Listed(state);
    const bool used = listed && was_listed && state.block->last_use != last_use;
    if (was_listed && (!listed || used)) ListRemove(slot);
    if (listed && (!was_listed || used)) ListInsert(slot);
    return;
  }
  if (!evictable) {
    if (was_evictable) HeapRemove(slot);
    return;
  }
  const EvictionRank rank = policy_->Rank(*state.block);
  if (!was_evictable) {
    state.rank = rank;
    HeapInsert(slot);
  } else if (rank != state.rank) {
    state.rank = rank;
    HeapFix(heap_index_[static_cast<size_t>(slot)]);
  }
}

bool DeviceSlotCache::Before(int32_t a, int32_t b) const {
  const EvictionRank& rank_a = slots_[static_cast<size_t>(a)].rank;
  const EvictionRank& rank_b = slots_[static_cast<size_t>(b)].rank;
  return rank_a < rank_b || (rank_a == rank_b && a < b);
}

int32_t DeviceSlotCache::Victim() const { return by_recency_ ? list_head_ : evictable_.front(); }

void DeviceSlotCache::ListInsert(int32_t slot) {
  const uint64_t last_use = slots_[static_cast<size_t>(slot)].block->last_use;
  int32_t before = list_tail_;
  while (before >= 0 && slots_[static_cast<size_t>(before)].block->last_use > last_use) {
    before = list_prev_[static_cast<size_t>(before)];
  }
  const int32_t after = before >= 0 ? list_next_[static_cast<size_t>(before)] : list_head_;
  list_prev_[static_cast<size_t>(slot)] = before;
  list_next_[static_cast<size_t>(slot)] = after;
  (before >= 0 ? list_next_[static_cast<size_t>(before)] : list_head_) = slot;
  (after >= 0 ? list_prev_[static_cast<size_t>(after)] : list_tail_) = slot;
}

void DeviceSlotCache::ListRemove(int32_t slot) {
  const int32_t before = list_prev_[static_cast<size_t>(slot)];
  const int32_t after = list_next_[static_cast<size_t>(slot)];
  (before >= 0 ? list_next_[static_cast<size_t>(before)] : list_head_) = after;
  (after >= 0 ? list_prev_[static_cast<size_t>(after)] : list_tail_) = before;
  list_prev_[static_cast<size_t>(slot)] = -1;
  list_next_[static_cast<size_t>(slot)] = -1;
}

void DeviceSlotCache::HeapPlace(int32_t index, int32_t slot) {
  evictable_[static_cast<size_t>(index)] = slot;
  heap_index_[static_cast<size_t>(slot)] = index;
}

void DeviceSlotCache::HeapInsert(int32_t slot) {
  evictable_.push_back(slot);
  HeapFix(static_cast<int32_t>(evictable_.size()) - 1);
}

void DeviceSlotCache::HeapRemove(int32_t slot) {
  const int32_t index = heap_index_[static_cast<size_t>(slot)];
  heap_index_[static_cast<size_t>(slot)] = -1;
  const int32_t last = evictable_.back();
  evictable_.pop_back();
  if (last == slot) return;
  HeapPlace(index, last);
  HeapFix(index);
}

void DeviceSlotCache::HeapFix(int32_t index) {
  const int32_t slot = evictable_[static_cast<size_t>(index)];
  const auto size = static_cast<int32_t>(evictable_.size());
  // Up while it leaves before its parent, else down while a child leaves before it.
  while (index > 0) {
    const int32_t parent = (index - 1) / 2;
    if (!Before(slot, evictable_[static_cast<size_t>(parent)])) break;
    HeapPlace(index, evictable_[static_cast<size_t>(parent)]);
    index = parent;
  }
  while (true) {
    int32_t child = 2 * index + 1;
    if (child >= size) break;
    if (child + 1 < size && Before(evictable_[static_cast<size_t>(child) + 1],
                                   evictable_[static_cast<size_t>(child)])) {
      ++child;
    }
    if (!Before(evictable_[static_cast<size_t>(child)], slot)) break;
    HeapPlace(index, evictable_[static_cast<size_t>(child)]);
    index = child;
  }
  HeapPlace(index, slot);
}

void DeviceSlotCache::Free(int32_t slot) {
  slot_of_block_[static_cast<size_t>(slots_[static_cast<size_t>(slot)].block->block)] = -1;
  Update(slot, [](Slot& state) { state = Slot{}; });
  free_slots_.push_back(slot);
}

std::optional<int32_t> DeviceSlotCache::Lookup(int32_t block, uint64_t request_id) {
  const int32_t slot = SlotIndex(block);
  CacheStats& request = request_stats_[request_id];
  if (slot < 0) {
    ++stats_.misses;
    ++request.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  ++request.hits;
  Update(slot, [&](Slot& state) {
    state.block->last_use = ++use_clock_;
    state.in_use = true;
  });
  return slot;
}

absl::StatusOr<SlotGrant> DeviceSlotCache::Acquire(int32_t block, uint64_t request_id) {
  if (block < 0 || block >= num_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot cache host block %d: the blocks are [0, %d)", block, num_blocks()));
  }
  if (const int32_t resident = SlotIndex(block); resident >= 0) {
    return absl::AlreadyExistsError(
        absl::StrFormat("host block %d is already in device slot %d", block, resident));
  }
  SlotGrant grant;
  if (!free_slots_.empty()) {
    grant.slot = free_slots_.back();
    free_slots_.pop_back();
  } else if (num_evictable_ == 0) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "no device slot for host block %d: all %d are pinned or in use", block, num_slots()));
  } else {
    grant.slot = Victim();
    const CachedBlock& victim = *slots_[static_cast<size_t>(grant.slot)].block;
    grant.evicted = victim.block;
    ++stats_.evictions;
    ++request_stats_[victim.request_id].evictions;
    slot_of_block_[static_cast<size_t>(victim.block)] = -1;
  }
  Update(grant.slot, [&](Slot& state) {
    state = Slot{.block = CachedBlock{.block = block,
                                      .request_id = request_id,
                                      .last_use = ++use_clock_,
                                      .score = std::numeric_limits<float>::infinity()},
                 .in_use = true};
  });
  slot_of_block_[static_cast<size_t>(block)] = grant.slot;
  return grant;
}

absl::Status DeviceSlotCache::Pin(int32_t block) {
  const std::optional<int32_t> slot = slot_of(block);
  if (!slot.has_value()) {
    return absl::NotFoundError(absl::StrFormat("cannot pin host block %d: not resident", block));
  }
  Update(*slot, [](Slot& state) { ++state.pins; });
  return absl::OkStatus();
}

absl::Status DeviceSlotCache::Unpin(int32_t block) {
  const std::optional<int32_t> slot = slot_of(block);
  if (!slot.has_value()) {
    return absl::NotFoundError(absl::StrFormat("cannot unpin host block %d: not resident", block));
  }
  if (slots_[static_cast<size_t>(*slot)].pins == 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot unpin host block %d: not pinned", block));
  }
  Update(*slot, [](Slot& state) { --state.pins; });
  return absl::OkStatus();
}

void DeviceSlotCache::NoteScore(int32_t block, float score) {
  const std::optional<int32_t> slot = slot_of(block);
  if (!slot.has_value()) return;
  Update(*slot, [&](Slot& state) {
    state.block->score = std::isnan(score) ? -std::numeric_limits<float>::infinity() : score;
  });
}

absl::Status DeviceSlotCache::Forget(int32_t block) {
  const std::optional<int32_t> slot = slot_of(block);
  if (!slot.has_value()) return absl::OkStatus();
  if (slots_[static_cast<size_t>(*slot)].in_use) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot forget host block %d: the step uses it", block));
  }
  Free(*slot);
  return absl::OkStatus();
}

absl::StatusOr<CacheStats> DeviceSlotCache::ForgetRequest(uint64_t request_id) {
  std::vector<int32_t> owned;
  for (int32_t slot = 0; slot < num_slots(); ++slot) {
    const Slot& state = slots_[static_cast<size_t>(slot)];
    if (!state.block.has_value() || state.block->request_id != request_id) continue;
    if (state.in_use) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot forget request %d: the step uses its host block %d", request_id,
                          state.block->block));
    }
    owned.push_back(slot);
  }
  for (const int32_t slot : owned) Free(slot);
  const auto it = request_stats_.find(request_id);
  if (it == request_stats_.end()) return CacheStats{};
  const CacheStats stats = it->second;
  request_stats_.erase(it);
  return stats;
}

void DeviceSlotCache::EndStep() {
  for (const int32_t slot : in_use_slots_) {
    Update(slot, [](Slot& state) { state.in_use = false; });
  }
  in_use_slots_.clear();
}

std::optional<int32_t> DeviceSlotCache::slot_of(int32_t block) const {
  const int32_t slot = SlotIndex(block);
  if (slot < 0) return std::nullopt;
  return slot;
}

std::optional<CachedBlock> DeviceSlotCache::block_in(int32_t slot) const {
  return slots_[static_cast<size_t>(slot)].block;
}

int32_t DeviceSlotCache::pins(int32_t block) const {
  const std::optional<int32_t> slot = slot_of(block);
  return slot.has_value() ? slots_[static_cast<size_t>(*slot)].pins : 0;
}

bool DeviceSlotCache::in_use(int32_t block) const {
  const std::optional<int32_t> slot = slot_of(block);
  return slot.has_value() && slots_[static_cast<size_t>(*slot)].in_use;
}

CacheStats DeviceSlotCache::request_stats(uint64_t request_id) const {
  const auto it = request_stats_.find(request_id);
  return it == request_stats_.end() ? CacheStats{} : it->second;
}

}  // namespace pulse
