// The order in which the device block cache (device_slot_cache.h) evicts: a policy ranks every
// evictable block and the lowest rank leaves first. The cache keeps the ranks in a heap and asks
// for a block's rank again whenever what it may depend on changes (a use, a score), so an eviction
// costs O(log slots) whatever the policy; for a policy that ranks by recency alone it keeps a list
// in use order instead, where a use, a step's end and an eviction cost O(1).
#pragma once

#include <compare>
#include <cstdint>

namespace pulse {

// What the cache knows of a resident block.
struct CachedBlock {
  int32_t block = 0;  // host block id
  uint64_t request_id = 0;
  uint64_t last_use = 0;  // the cache's use counter at the block's latest hit or acquisition
  float score = 0.0f;     // the block's latest selection score; never NaN
};

// Lexicographic: score, then last_use. The cache breaks the remaining ties by slot.
struct EvictionRank {
  float score = 0.0f;  // never NaN
  uint64_t last_use = 0;

  friend auto operator<=>(const EvictionRank&, const EvictionRank&) = default;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // A function of `block` alone.
  virtual EvictionRank Rank(const CachedBlock& block) const = 0;
  // Whether Rank orders blocks as their last_use does and nothing else.
  virtual bool RanksByRecency() const { return false; }
};

// Least recently used first.
class LruEviction final : public EvictionPolicy {
 public:
  EvictionRank Rank(const CachedBlock& block) const override;
  bool RanksByRecency() const override { return true; }
};

// Lowest latest selection score first, least recently used among equals: blocks the recent
// queries stopped wanting leave before blocks they still rank high, however old those are.
class ScoreAwareEviction final : public EvictionPolicy {
 public:
  EvictionRank Rank(const CachedBlock& block) const override;
};

}  // namespace pulse
