#include "core/offload/residency.h"

#include <algorithm>

#include "core/kv/block_table.h"

namespace pulse {

int32_t ResidentBlocks(const SelectionOptions& selection, int32_t block_tokens) {
  return BlocksForTokens(selection.sink_tokens, block_tokens) +
         BlocksForTokens(selection.window_tokens, block_tokens) + 2;
}

int32_t PeakDeviceBlocks(const SelectionOptions& selection, int32_t block_tokens,
                         int32_t prompt_tokens, int32_t max_kv_tokens) {
  return std::min(BlocksForTokens(max_kv_tokens, block_tokens),
                  std::max(BlocksForTokens(prompt_tokens, block_tokens),
                           ResidentBlocks(selection, block_tokens)));
}

int32_t SlotsNeeded(const SelectionOptions& selection, int32_t block_tokens,
                    int32_t max_kv_tokens) {
  return std::min(selection.budget_tokens, max_kv_tokens) / block_tokens;
}

absl::Status MakeResidentSet(OffloadedBlockTable& blocks, const SelectionOptions& selection,
                             int32_t block_tokens, int32_t position,
                             std::vector<int32_t>& recall_host,
                             std::vector<int32_t>& recall_device) {
  const BlockRange range = NonResidentBlocks(position, block_tokens, selection);
  PULSE_RETURN_IF_ERROR(blocks.MakeResident(0, range.begin, recall_host, recall_device));
  return blocks.MakeResident(range.end, static_cast<int32_t>(blocks.device_blocks().size()),
                             recall_host, recall_device);
}

std::vector<WriteBackEntry> KeepResidentSet(OffloadedBlockTable& blocks,
                                            const SelectionOptions& selection, int32_t block_tokens,
                                            int32_t position) {
  const BlockRange range = NonResidentBlocks(position, block_tokens, selection);
  std::vector<WriteBackEntry> departed = blocks.Evict(range.begin, range.end);
  blocks.LimitDevice(ResidentBlocks(selection, block_tokens));
  return departed;
}

}  // namespace pulse
