#include "core/backend/reference/sparse_selection.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"

namespace pulse::reference {
namespace {

// Which `count` of the (key, index) pairs are the smallest, as indices in increasing order.
template <typename Key>
std::vector<int32_t> Smallest(std::vector<std::pair<Key, int32_t>> keys, size_t count) {
  count = std::min(count, keys.size());
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(count), keys.end());
  std::vector<int32_t> chosen;
  chosen.reserve(count);
  for (size_t i = 0; i < count; ++i) chosen.push_back(keys[i].second);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

// Rows picking one block in a step keep the best of their scores (StampedScore).
void KeepBestScore(const SlotDirectoryView& directory, int64_t at, int32_t step, float score) {
  directory.score[at] = std::max(directory.score[at], StampedScore(step, score));
}

bool Inside(int64_t first, int64_t count, size_t size) {
  return first >= 0 && count >= 0 && first + count <= static_cast<int64_t>(size);
}

}  // namespace

void SelectTop(std::span<const float> scores, std::span<int32_t> picked) {
  std::vector<std::pair<uint32_t, int32_t>> keys;
  keys.reserve(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    keys.emplace_back(SelectionKey(scores[i]), static_cast<int32_t>(i));
  }
  const std::vector<int32_t> chosen = Smallest(std::move(keys), picked.size());
  std::copy(chosen.begin(), chosen.end(), picked.begin());
}

absl::Status SelectTopBlocks(std::span<const float> scores, std::span<const ScoreSegment> segments,
                             std::span<int32_t> picked) {
  for (const ScoreSegment& segment : segments) {
    if (segment.num_sets <= 0 || segment.picks > segment.count ||
        !Inside(segment.scores_first, int64_t{segment.num_sets} * segment.count, scores.size()) ||
        !Inside(segment.picks_first, int64_t{segment.num_sets} * segment.picks, picked.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "top blocks: a segment of %d sets of %d scores from %d picking %d to %d lies outside %d "
          "scores and %d picks",
          segment.num_sets, segment.count, segment.scores_first, segment.picks, segment.picks_first,
          scores.size(), picked.size()));
    }
  }
  for (const ScoreSegment& segment : segments) {
    for (int32_t set = 0; set < segment.num_sets; ++set) {
      SelectTop(scores.subspan(segment.scores_first + static_cast<size_t>(set) * segment.count,
                               static_cast<size_t>(segment.count)),
                picked.subspan(segment.picks_first + static_cast<size_t>(set) * segment.picks,
                               static_cast<size_t>(segment.picks)));
    }
  }
  return absl::OkStatus();
}

absl::Status BuildSparseTables(const SparseTableBuild& build) {
  const SlotDirectoryView& directory = build.directory;
  const int32_t step = *build.step;
  const int64_t stride = build.table_stride;
  const auto count = [&build](int32_t row, SparseCounter counter) -> int64_t& {
    return build.counters[int64_t{row} * kSparseCounters + counter];
  };
  for (int32_t set = 0; set < build.num_sets; ++set) {
    if (set < directory.num_sets) build.recalls.counts[set] = 0;
    std::vector<RecallEntry> misses;
    // Each miss's block, and the picks that follow a miss of their block: (miss, table index,
    // score).
    absl::flat_hash_map<int32_t, size_t> miss_of_block;
    std::vector<std::tuple<size_t, int64_t, float>> followers;
    for (int32_t r = 0; r < build.num_rows; ++r) {
      const SparseTableRow& row = build.rows[r];
      const ScoreSegment& segment = build.segments[row.segment];
      const int32_t table_row = r * build.num_sets + set;
      if (segment.num_sets != build.num_sets ||
          row.sink_blocks + segment.picks + row.window_blocks > stride ||
          (row.offloaded != 0 && set >= directory.num_sets)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "sparse tables: row %d has %d + %d + %d blocks for tables of %d, %d sets of %d", r,
            row.sink_blocks, segment.picks, row.window_blocks, stride, segment.num_sets,
            build.num_sets));
      }
      int32_t* table = build.tables + table_row * stride;
      const int32_t* fixed = build.fixed_blocks + row.fixed_first;
      std::copy(fixed, fixed + row.sink_blocks, table);
      std::copy(fixed + row.sink_blocks, fixed + row.sink_blocks + row.window_blocks,
                table + row.sink_blocks + segment.picks);
      build.kv_lens[table_row] = row.kv_len;
      const int32_t* picks = build.picked + segment.picks_first + int64_t{set} * segment.picks;
      for (int32_t j = 0; j < segment.picks; ++j) {
        const int32_t candidate = segment.first + picks[j];
        const int32_t summary = build.summary_ids[candidate];
        if (picks[j] < 0 || picks[j] >= segment.count || summary < 0 ||
            summary >= build.num_summaries) {
          return absl::InvalidArgumentError(
              absl::StrFormat("sparse tables: row %d picks candidate %d of %d, summary %d of %d", r,
                              picks[j], segment.count, summary, build.num_summaries));
        }
        int32_t& stamp = build.pick_stamps[int64_t{set} * build.num_summaries + summary];
        count(r, kSparseReused) += stamp == step - 1 ? 1 : 0;
        stamp = step;
        const int32_t block = build.candidate_blocks[candidate];
        int32_t& entry = table[row.sink_blocks + j];
        if (row.offloaded == 0) {
          entry = block;
          continue;
        }
        if (block < 0 || block >= directory.num_blocks) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "sparse tables: row %d picks host block %d of %d", r, block, directory.num_blocks));
        }
        const float score =
            build.scores[segment.scores_first + int64_t{set} * segment.count + picks[j]];
        const int32_t slot = directory.slot_of_block[int64_t{set} * directory.num_blocks + block];
        if (slot < 0) {
          // Slot 0 until a victim is found (the table never names a block outside the cache).
          entry = directory.first_slot;
          const int64_t table_index = table_row * stride + row.sink_blocks + j;
          if (const auto [it, first] = miss_of_block.emplace(block, misses.size()); !first) {
            followers.emplace_back(it->second, table_index, score);
            ++count(r, kSparseHits);
            continue;
          }
          misses.push_back({block, -1, static_cast<int32_t>(table_index), score});
          continue;
        }
        const int64_t at = int64_t{set} * directory.num_slots + slot;
        directory.last_used[at] = step;
        KeepBestScore(directory, at, step, score);
        entry = directory.first_slot + slot;
        ++count(r, kSparseHits);
      }
    }
    if (misses.empty()) continue;
    std::vector<std::pair<uint64_t, int32_t>> evictable;
    for (int32_t slot = 0; slot < directory.num_slots; ++slot) {
      if (directory.last_used[int64_t{set} * directory.num_slots + slot] < step) {
        evictable.emplace_back(VictimKey(directory, set, slot), slot);
      }
    }
    const std::vector<int32_t> victims = Smallest(
        std::move(evictable), std::min(misses.size(), static_cast<size_t>(build.recalls.capacity)));
    // A miss's row, from its table entry.
    const auto row_of = [&](const RecallEntry& miss) {
      return static_cast<int32_t>(miss.table_index / stride / build.num_sets);
    };
    for (size_t i = victims.size(); i < misses.size(); ++i) {
      ++count(row_of(misses[i]), kSparseOverflow);
    }
    for (const auto& [miss, table_index, score] : followers) {
      if (miss >= victims.size()) {
        ++count(static_cast<int32_t>(table_index / stride / build.num_sets), kSparseOverflow);
      }
    }
    RecallEntry* recalls = build.recalls.entries + int64_t{set} * build.recalls.capacity;
    for (size_t i = 0; i < victims.size(); ++i) {
      RecallEntry miss = misses[i];
      const int32_t row = row_of(miss);
      const int32_t slot = victims[i];
      const int64_t at = int64_t{set} * directory.num_slots + slot;
      if (const int32_t evicted = directory.block_of_slot[at]; evicted >= 0) {
        directory.slot_of_block[int64_t{set} * directory.num_blocks + evicted] = -1;
        ++count(row, kSparseEvictions);
      }
      directory.slot_of_block[int64_t{set} * directory.num_blocks + miss.host_block] = slot;
      directory.block_of_slot[at] = miss.host_block;
      directory.last_used[at] = step;
      directory.score[at] = StampedScore(step, miss.score);
      build.tables[miss.table_index] = directory.first_slot + slot;
      miss.slot = slot;
      recalls[i] = miss;
      ++count(row, kSparseMisses);
    }
    for (const auto& [miss, table_index, score] : followers) {
      if (miss >= victims.size()) continue;
      KeepBestScore(directory, int64_t{set} * directory.num_slots + victims[miss], step, score);
      build.tables[table_index] = build.tables[misses[miss].table_index];
    }
    build.recalls.counts[set] = static_cast<int32_t>(victims.size());
  }
  return absl::OkStatus();
}

void ForgetSlots(const SlotDirectoryView& directory, std::span<const int32_t> blocks) {
  for (int32_t set = 0; set < directory.num_sets; ++set) {
    for (const int32_t block : blocks) {
      if (block < 0 || block >= directory.num_blocks) continue;
      int32_t& slot = directory.slot_of_block[int64_t{set} * directory.num_blocks + block];
      if (slot < 0) continue;
      const int64_t at = int64_t{set} * directory.num_slots + slot;
      directory.block_of_slot[at] = -1;
      directory.last_used[at] = -1;
      directory.score[at] = 0;
      slot = -1;
    }
  }
}

absl::Status AdoptFreeSlots(std::span<const SlotLayer> layers,
                            std::span<const WriteBackEntry> entries, const PagedKvLayout& layout) {
  for (const SlotLayer& layer : layers) {
    const SlotDirectoryView& directory = layer.directory;
    for (const WriteBackEntry& entry : entries) {
      if (entry.device_block < 0 || entry.device_block >= directory.first_slot ||
          entry.host_block < 0 || entry.host_block >= directory.num_blocks) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "AdoptFreeSlots: device block %d (the slots start at %d), host block %d of %d",
            entry.device_block, directory.first_slot, entry.host_block, directory.num_blocks));
      }
    }
  }
  const int64_t block_bytes = layout.block_bytes();
  const int64_t fragment = layout.head_elems() * static_cast<int64_t>(DTypeBytes(layout.type));
  const int64_t values = layout.value_offset() * static_cast<int64_t>(DTypeBytes(layout.type));
  for (const SlotLayer& layer : layers) {
    const SlotDirectoryView& directory = layer.directory;
    char* cache = static_cast<char*>(layer.blocks);
    for (int32_t set = 0; set < directory.num_sets; ++set) {
      int32_t* slot_of_block = directory.slot_of_block + int64_t{set} * directory.num_blocks;
      size_t next = 0;  // the entry the next free slot goes to
      for (int32_t slot = 0; slot < directory.num_slots && next < entries.size(); ++slot) {
        const int64_t at = int64_t{set} * directory.num_slots + slot;
        if (directory.block_of_slot[at] >= 0) continue;
        const int32_t block = entries[next++].host_block;
        if (slot_of_block[block] >= 0) continue;  // already in a slot: this free slot stays free
        slot_of_block[block] = slot;
        directory.block_of_slot[at] = block;
        directory.last_used[at] = 0;
        directory.score[at] = StampedScore(0, -std::numeric_limits<float>::infinity());
      }
      for (const WriteBackEntry& entry : entries) {
        const int32_t slot = slot_of_block[entry.host_block];
        if (slot < 0) continue;
        const char* src = cache + entry.device_block * block_bytes;
        char* dst = cache + (directory.first_slot + slot) * block_bytes;
        if (directory.num_sets == 1) {
          std::memcpy(dst, src, static_cast<size_t>(block_bytes));
          continue;
        }
        for (const int64_t offset : {set * fragment, values + set * fragment}) {
          std::memcpy(dst + offset, src + offset, static_cast<size_t>(fragment));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pulse::reference
