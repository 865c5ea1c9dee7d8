// The BPE merge loop shared by both tokenizer models.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace pulse {

struct MergeResult {
  int64_t rank;  // lower merges first
  int32_t id;    // the merged token
};

// (left id, right id) -> what they merge into.
using MergeTable = absl::flat_hash_map<uint64_t, MergeResult>;

inline uint64_t MergeKey(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

// Merges adjacent symbols of `symbols` in place until no pair of neighbours is in `merges`: the
// pair of lowest rank first, the leftmost of equal ranks first. Negative ids never merge.
// O(n log n), so one long piece costs no more than many short ones.
void ApplyMerges(const MergeTable& merges, std::vector<int32_t>& symbols);

}  // namespace pulse
