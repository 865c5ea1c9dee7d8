// What a full KV block of a token sequence holds, as the prefix cache (BlockPool::Cache) names
// it: its tokens and the key of the block before it, so that equal keys mean equal token
// prefixes up to the block's end, hence equal KV. The hash is of both and stays within the
// process; a lookup compares the tokens and the parent's hash too, so that only a collision of
// the parent's 64-bit hash could match a different prefix.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pulse {

struct BlockKey {
  uint64_t hash = 0;
  uint64_t parent = 0;  // the previous block's hash; 0 for a sequence's first block
  std::vector<int32_t> tokens;

  bool operator==(const BlockKey& other) const = default;
};

// The keys of the full blocks of `tokens` (blocks of `block_tokens`), in order.
std::vector<BlockKey> FullBlockKeys(std::span<const int32_t> tokens, int32_t block_tokens);

}  // namespace pulse
