// The device-driven sparse step's selection ops in plain C++ (Backend::SelectTopBlocks,
// BuildSparseTables, ForgetSlots, AdoptFreeSlots): what the CPU backend runs, what the CUDA kernels
// must match bit for bit, and the order core/offload's selector ranks by.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/backend/block_scores.h"
#include "core/backend/sparse_tables.h"
#include "core/base/status.h"

namespace pulse::reference {

// The `picks` candidates of `scores` that rank first (the smallest SelectionKey, the lower index
// among equal keys), as indices in increasing order, into `picked` (picks of them).
void SelectTop(std::span<const float> scores, std::span<int32_t> picked);

// Backend::SelectTopBlocks. InvalidArgument, writing nothing, for a segment whose candidates,
// scores or picks lie outside the spans, or that picks more than it has.
absl::Status SelectTopBlocks(std::span<const float> scores, std::span<const ScoreSegment> segments,
                             std::span<int32_t> picked);

// Backend::BuildSparseTables over host-addressable memory. For each set k and row r in order,
// table row r.table_first + k gets the row's sinks, its picks in increasing candidate order and
// its window, and its kv_len. A pick marks its summary's stamp with the step (counting the pick
// as reused when the stamp was the step before). A pick of a row that is not offloaded is its
// candidate's dense block. An offloaded row's pick looks its host block up in set k of the
// directory: a hit stamps the slot with the step and its score (NaN as -infinity); a miss is
// queued, unless an earlier pick of the step (in the order of the rows and their picks) missed
// the same block: then it follows that miss, taking the slot the miss gets, and counts as a hit
// (one recall serves every row that picked the block: rows sharing a cached prefix). Then the
// set's misses, in that order, take the slots with the smallest VictimKey among those whose last
// use is before the step, in increasing slot order: each victim's previous block (an eviction)
// leaves the directory, the missed block takes the slot (stamped with the step and its score),
// and the miss is appended to the set's recall list. Misses beyond the evictable slots, and
// their followers, are counted as an overflow and get slot 0's block (never read: the step
// fails). InvalidArgument for indices outside what the build describes.
absl::Status BuildSparseTables(const SparseTableBuild& build);

// Backend::ForgetSlots.
void ForgetSlots(const SlotDirectoryView& directory, std::span<const int32_t> blocks);

// Backend::AdoptFreeSlots over host-addressable memory. InvalidArgument, changing nothing, for an
// entry whose device block lies in the slots or past them, or whose host block is out of range.
absl::Status AdoptFreeSlots(std::span<const SlotLayer> layers,
                            std::span<const WriteBackEntry> entries, const PagedKvLayout& layout);

}  // namespace pulse::reference
