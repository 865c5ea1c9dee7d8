// Where an offloaded request's KV lives, as the scheduler sizes and moves it: while its prompt
// is prefilled every block is resident (chunks attend densely); from its first decode step on,
// only its sink blocks, its recent window and the block being written stay in the dense pool,
// and the rest lives in the host tier, recalled into the device tier's slots when selected.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend/sparse_tables.h"
#include "core/offload/offloaded_block_table.h"
#include "core/offload/selection.h"

namespace pulse {

// The device blocks a decoding request keeps resident: its sinks, its window and the block it
// writes (one more when the window straddles a block boundary).
int32_t ResidentBlocks(const SelectionOptions& selection, int32_t block_tokens);
// The device blocks it holds at once at most: its prompt's or its resident set, whichever is
// more, and never more than its whole context's (max_kv_tokens).
int32_t PeakDeviceBlocks(const SelectionOptions& selection, int32_t block_tokens,
                         int32_t prompt_tokens, int32_t max_kv_tokens);
// The device-tier slots its selection takes in a step (in each set): its budget's picks, or its
// whole context's when the budget covers it.
int32_t SlotsNeeded(const SelectionOptions& selection, int32_t block_tokens, int32_t max_kv_tokens);
// After a staged prefill (OffloadedBlockTable::GrowHost), before the decode step that writes the
// token at `position`: gives device blocks to its sinks, its window and the block it writes, and
// appends them (host block to recall_host, device block to recall_device) for the caller to
// recall from the host tier.
absl::Status MakeResidentSet(OffloadedBlockTable& blocks, const SelectionOptions& selection,
                             int32_t block_tokens, int32_t position,
                             std::vector<int32_t>& recall_host,
                             std::vector<int32_t>& recall_device);
// Before the decode step that writes the token at `position`: frees the device blocks that left
// the window (written back to the host tier when they filled) and gives back the device
// reservation beyond the resident set. Returns the blocks freed (dense block -> host block),
// whose content stays whole until a step writes them (SparseSequence::departed).
std::vector<WriteBackEntry> KeepResidentSet(OffloadedBlockTable& blocks,
                                            const SelectionOptions& selection, int32_t block_tokens,
                                            int32_t position);

}  // namespace pulse
