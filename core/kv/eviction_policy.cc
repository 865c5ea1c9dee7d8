#include "core/kv/eviction_policy.h"

namespace pulse {

EvictionRank LruEviction::Rank(const CachedBlock& block) const {
  return {.score = 0.0f, .last_use = block.last_use};
}

EvictionRank ScoreAwareEviction::Rank(const CachedBlock& block) const {
  return {.score = block.score, .last_use = block.last_use};
}

}  // namespace pulse
