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

absl::StatusOr<std::vector<WriteBackEntry>> MakeResidentSet(OffloadedBlockTable& blocks,
                                                            const SelectionOptions& selection,
                                                            int32_t block_tokens,
                                                            int32_t position) {
  const BlockRange range = NonResidentBlocks(position, block_tokens, selection);
  PULSE_ASSIGN_OR_RETURN(std::vector<WriteBackEntry> made, blocks.MakeResident(0, range.begin));
  PULSE_ASSIGN_OR_RETURN(
      const std::vector<WriteBackEntry> rest,
      blocks.MakeResident(range.end, static_cast<int32_t>(blocks.device_blocks().size())));
  made.insert(made.end(), rest.begin(), rest.end());
  return made;
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
