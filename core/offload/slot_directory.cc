#include "core/offload/slot_directory.h"

#include <algorithm>
#include <utility>

namespace pulse {
namespace {

// int32 words of a slot's state: its block, its last use and the two halves of its uint64 score.
constexpr size_t kSlotStateWords = 4;

}  // namespace

absl::StatusOr<SlotDirectory> SlotDirectory::Create(Backend& backend, int32_t num_layers,
                                                    int32_t num_sets, int32_t num_slots,
                                                    int32_t num_blocks, int32_t first_slot,
                                                    bool score_aware) {
  SlotDirectory directory(backend, num_sets, num_slots, num_blocks, first_slot, score_aware);
  const auto slots = static_cast<size_t>(num_sets) * static_cast<size_t>(num_slots);
  const auto blocks = static_cast<size_t>(num_sets) * static_cast<size_t>(num_blocks);
  for (int32_t layer = 0; layer < num_layers; ++layer) {
    Layer buffers;
    PULSE_ASSIGN_OR_RETURN(buffers.slot_of_block, backend.Allocate(blocks * sizeof(int32_t)));
    PULSE_ASSIGN_OR_RETURN(buffers.slot_state,
                           backend.Allocate(kSlotStateWords * slots * sizeof(int32_t)));
    directory.layers_.push_back(std::move(buffers));
  }
  directory.Clear();
  return directory;
}

SlotDirectoryView SlotDirectory::view(int32_t layer) const {
  const Layer& buffers = layers_[static_cast<size_t>(layer)];
  int32_t* state = buffers.slot_state.as<int32_t>();
  const int64_t slots = int64_t{num_sets_} * num_slots_;
  return {.num_sets = num_sets_,
          .num_slots = num_slots_,
          .num_blocks = num_blocks_,
          .first_slot = first_slot_,
          .score_aware = score_aware_ ? 1 : 0,
          .slot_of_block = buffers.slot_of_block.as<int32_t>(),
          .block_of_slot = state,
          .last_used = state + slots,
          .score = reinterpret_cast<uint64_t*>(state + 2 * slots)};
}

absl::Status SlotDirectory::Forget(std::span<const int32_t> host_blocks) {
  if (host_blocks.empty()) return absl::OkStatus();
  if (forget_.bytes() < host_blocks.size_bytes()) {
    absl::StatusOr<DeviceBuffer> grown =
        backend_->Allocate(std::max(host_blocks.size_bytes(), 2 * forget_.bytes()));
    if (!grown.ok()) {
      // No room for the list: forgetting every block is as correct, only slower to refill.
      Clear();
      return absl::OkStatus();
    }
    forget_ = *std::move(grown);
  }
  backend_->CopyToDevice(forget_.data(), host_blocks.data(), host_blocks.size_bytes());
  for (int32_t layer = 0; layer < static_cast<int32_t>(layers_.size()); ++layer) {
    backend_->ForgetSlots(view(layer), forget_.as<int32_t>(),
                          static_cast<int32_t>(host_blocks.size()));
  }
  return absl::OkStatus();
}

void SlotDirectory::Clear() {
  const auto slots = static_cast<size_t>(num_sets_) * static_cast<size_t>(num_slots_);
  const auto blocks = static_cast<size_t>(num_sets_) * static_cast<size_t>(num_blocks_);
  // Free slots hold block -1, were last used at step -1 and score 0.
  std::vector<int32_t> state(kSlotStateWords * slots, -1);
  std::fill(state.begin() + static_cast<std::ptrdiff_t>(2 * slots), state.end(), 0);
  const std::vector<int32_t> no_slots(blocks, -1);
  for (const Layer& buffers : layers_) {
    backend_->CopyToDevice(buffers.slot_of_block.data(), no_slots.data(),
                           no_slots.size() * sizeof(int32_t));
    backend_->CopyToDevice(buffers.slot_state.data(), state.data(), state.size() * sizeof(int32_t));
  }
}

}  // namespace pulse
