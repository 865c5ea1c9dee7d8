#include "core/kv/block_key.h"

#include "absl/hash/hash.h"

namespace pulse {

std::vector<BlockKey> FullBlockKeys(std::span<const int32_t> tokens, int32_t block_tokens) {
  std::vector<BlockKey> keys;
  if (block_tokens <= 0) return keys;
  uint64_t parent = 0;
  for (size_t end = static_cast<size_t>(block_tokens); end <= tokens.size();
       end += static_cast<size_t>(block_tokens)) {
    BlockKey& key = keys.emplace_back();
    key.parent = parent;
    key.tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(end) - block_tokens,
                      tokens.begin() + static_cast<ptrdiff_t>(end));
    // Never 0, which names "no parent".
    key.hash = absl::HashOf(parent, key.tokens) | 1;
    parent = key.hash;
  }
  return keys;
}

}  // namespace pulse
