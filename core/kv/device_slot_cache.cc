#include "core/kv/device_slot_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace pulse {

DeviceSlotCache::DeviceSlotCache(int32_t num_slots, std::unique_ptr<EvictionPolicy> policy)
    : policy_(std::move(policy)), slots_(static_cast<size_t>(std::max(num_slots, 0))) {
  free_slots_.reserve(slots_.size());
  for (int32_t slot = this->num_slots() - 1; slot >= 0; --slot) free_slots_.push_back(slot);
}

template <typename Change>
void DeviceSlotCache::Update(int32_t slot, Change change) {
  Slot& state = slots_[static_cast<size_t>(slot)];
  const bool was_evictable = Evictable(state);
  const bool was_in_use = state.in_use;
  const uint64_t version = state.version;
  change(state);
  if (!was_in_use && state.in_use) in_use_slots_.push_back(slot);
  const bool evictable = Evictable(state);
  num_evictable_ += static_cast<int32_t>(evictable) - static_cast<int32_t>(was_evictable);
  if (!evictable) {
    state.version = ++version_clock_;  // any entry left is stale
    return;
  }
  const EvictionRank rank = policy_->Rank(*state.block);
  if (was_evictable && rank == state.rank) {
    state.version = version;  // the entry in the heap still holds
    return;
  }
  state.rank = rank;
  state.version = ++version_clock_;
  evictable_.push_back({rank, slot, state.version});
  std::push_heap(evictable_.begin(), evictable_.end(), Later{});
  CompactIfStale();
}

int32_t DeviceSlotCache::Victim() {
  while (!evictable_.empty()) {
    const Candidate& top = evictable_.front();
    const Slot& state = slots_[static_cast<size_t>(top.slot)];
    if (state.version == top.version && Evictable(state)) return top.slot;
    std::pop_heap(evictable_.begin(), evictable_.end(), Later{});
    evictable_.pop_back();
  }
  return -1;
}

void DeviceSlotCache::CompactIfStale() {
  if (evictable_.size() <= 2 * slots_.size() + 64) return;
  evictable_.clear();
  for (int32_t slot = 0; slot < num_slots(); ++slot) {
    const Slot& state = slots_[static_cast<size_t>(slot)];
    if (Evictable(state)) evictable_.push_back({state.rank, slot, state.version});
  }
  std::make_heap(evictable_.begin(), evictable_.end(), Later{});
}

void DeviceSlotCache::Free(int32_t slot) {
  slot_of_block_.erase(slots_[static_cast<size_t>(slot)].block->block);
  Update(slot, [](Slot& state) { state = Slot{}; });
  free_slots_.push_back(slot);
}

std::optional<int32_t> DeviceSlotCache::Lookup(int32_t block, uint64_t request_id) {
  const auto it = slot_of_block_.find(block);
  CacheStats& request = request_stats_[request_id];
  if (it == slot_of_block_.end()) {
    ++stats_.misses;
    ++request.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  ++request.hits;
  const int32_t slot = it->second;
  Update(slot, [&](Slot& state) {
    state.block->last_use = ++use_clock_;
    state.in_use = true;
  });
  return slot;
}

absl::StatusOr<SlotGrant> DeviceSlotCache::Acquire(int32_t block, uint64_t request_id) {
  if (block < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot cache host block %d", block));
  }
  if (slot_of_block_.contains(block)) {
    return absl::AlreadyExistsError(absl::StrFormat("host block %d is already in device slot %d",
                                                    block, slot_of_block_.at(block)));
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
    slot_of_block_.erase(victim.block);
  }
  Update(grant.slot, [&](Slot& state) {
    state = Slot{.block = CachedBlock{.block = block,
                                      .request_id = request_id,
                                      .last_use = ++use_clock_,
                                      .score = std::numeric_limits<float>::infinity()},
                 .in_use = true};
  });
  slot_of_block_.emplace(block, grant.slot);
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
  const auto it = slot_of_block_.find(block);
  if (it == slot_of_block_.end()) return std::nullopt;
  return it->second;
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
