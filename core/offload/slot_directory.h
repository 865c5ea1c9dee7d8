// The device tier's directory, a layer each (sparse_tables.h's SlotDirectoryView): which host
// block each slot holds, per selection set, and when the step last used it. Cleared once when
// made; from then on only the backend's ops change it, on the device (BuildSparseTables hits,
// misses and evictions; ForgetSlots when a request ends), so a step never asks the host which
// blocks are resident.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/backend/backend.h"
#include "core/base/status.h"

namespace pulse {

class SlotDirectory {
 public:
  // `num_slots` slots a set (blocks first_slot + s of each layer's cache) over host blocks
  // [0, num_blocks). ResourceExhausted when it does not fit the backend.
  static absl::StatusOr<SlotDirectory> Create(Backend& backend, int32_t num_layers,
                                              int32_t num_sets, int32_t num_slots,
                                              int32_t num_blocks, int32_t first_slot,
                                              bool score_aware);

  int32_t num_sets() const { return num_sets_; }
  int32_t num_slots() const { return num_slots_; }
  int32_t first_slot() const { return first_slot_; }
  SlotDirectoryView view(int32_t layer) const;
  // Enqueues the freeing of every slot that holds one of `host_blocks` (a finished request's),
  // in every layer and set, so that those blocks can serve another request (all slots, when the
  // backend has no memory for the list).
  absl::Status Forget(std::span<const int32_t> host_blocks);
  // Enqueues the clearing of every layer: no block is resident (after a step that failed half
  // way, whose misses may have been given slots that were never filled).
  void Clear();

 private:
  struct Layer {
    DeviceBuffer slot_of_block;  // int32 [sets][blocks]
    DeviceBuffer slot_state;     // int32 block_of_slot [sets][slots], last_used, then uint64 score
  };

  SlotDirectory(Backend& backend, int32_t num_sets, int32_t num_slots, int32_t num_blocks,
                int32_t first_slot, bool score_aware)
      : backend_(&backend),
        num_sets_(num_sets),
        num_slots_(num_slots),
        num_blocks_(num_blocks),
        first_slot_(first_slot),
        score_aware_(score_aware) {}

  Backend* backend_;
  int32_t num_sets_;
  int32_t num_slots_;
  int32_t num_blocks_;
  int32_t first_slot_;
  bool score_aware_;
  std::vector<Layer> layers_;
  DeviceBuffer forget_;  // int32: the blocks of the last Forget, grown as needed
};

}  // namespace pulse
