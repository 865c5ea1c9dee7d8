#include "core/kv/device_slot_cache.h"

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

constexpr int32_t kBlocks = 64;  // host block ids [0, 64) in the tests of one case

using ::testing::HasSubstr;
using ::testing::Optional;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

enum class Policy { kLru, kScoreAware };

std::unique_ptr<EvictionPolicy> MakePolicy(Policy policy) {
  if (policy == Policy::kLru) return std::make_unique<LruEviction>();
  return std::make_unique<ScoreAwareEviction>();
}

int32_t SlotOf(const absl::StatusOr<SlotGrant>& grant) {
  EXPECT_TRUE(grant.ok()) << grant.status();
  return grant.ok() ? grant->slot : -1;
}

// The block a successful Acquire evicted.
std::optional<int32_t> EvictedBy(const absl::StatusOr<SlotGrant>& grant) {
  EXPECT_TRUE(grant.ok()) << grant.status();
  return grant.ok() ? grant->evicted : std::nullopt;
}

TEST(DeviceSlotCacheTest, FreshCacheHandsOutSlotsInOrderAndCountsLookups) {
  DeviceSlotCache cache(3, kBlocks, std::make_unique<LruEviction>());
  EXPECT_EQ(cache.num_slots(), 3);
  EXPECT_EQ(cache.num_free(), 3);
  EXPECT_EQ(cache.Lookup(10, 1), std::nullopt);
  EXPECT_EQ(SlotOf(cache.Acquire(10, 1)), 0);
  EXPECT_EQ(SlotOf(cache.Acquire(11, 1)), 1);
  EXPECT_EQ(SlotOf(cache.Acquire(20, 2)), 2);
  EXPECT_THAT(cache.Lookup(11, 1), Optional(1));
  EXPECT_THAT(cache.Lookup(20, 2), Optional(2));
  EXPECT_EQ(cache.Lookup(21, 2), std::nullopt);
  EXPECT_EQ(cache.stats(), (CacheStats{.hits = 2, .misses = 2}));
  EXPECT_EQ(cache.request_stats(1), (CacheStats{.hits = 1, .misses = 1}));
  EXPECT_EQ(cache.request_stats(2), (CacheStats{.hits = 1, .misses = 1}));
  EXPECT_EQ(cache.request_stats(3), CacheStats{});
  EXPECT_EQ(cache.num_free(), 0);
  EXPECT_THAT(cache.block_in(2), Optional(testing::Field(&CachedBlock::block, 20)));
}

TEST(DeviceSlotCacheTest, InUseBlocksStayUntilTheStepEnds) {
  DeviceSlotCache cache(2, kBlocks, std::make_unique<LruEviction>());
  ASSERT_TRUE(cache.Acquire(1, 7).ok());
  ASSERT_TRUE(cache.Acquire(2, 7).ok());
  EXPECT_EQ(cache.num_evictable(), 0);
  const absl::StatusOr<SlotGrant> full = cache.Acquire(3, 7);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("all 2 are pinned or in use"));
  EXPECT_THAT(cache.slot_of(1), Optional(0));
  EXPECT_THAT(cache.slot_of(2), Optional(1));
  EXPECT_EQ(cache.slot_of(3), std::nullopt);

  cache.EndStep();
  EXPECT_EQ(cache.num_evictable(), 2);
  ASSERT_TRUE(cache.Lookup(1, 7).has_value());  // block 1 in use again, block 2 evictable
  const absl::StatusOr<SlotGrant> grant = cache.Acquire(3, 7);
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->slot, 1);
  EXPECT_THAT(grant->evicted, Optional(2));
  EXPECT_EQ(cache.slot_of(2), std::nullopt);
  EXPECT_EQ(cache.Acquire(4, 7).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(DeviceSlotCacheTest, LruEvictsTheLeastRecentlyUsed) {
  DeviceSlotCache cache(3, kBlocks, std::make_unique<LruEviction>());
  for (const int32_t block : {1, 2, 3}) ASSERT_TRUE(cache.Acquire(block, 0).ok());
  cache.EndStep();
  ASSERT_TRUE(cache.Lookup(1, 0).has_value());  // 1 is now the most recent
  cache.EndStep();
  EXPECT_THAT(EvictedBy(cache.Acquire(4, 0)), Optional(2));
  cache.EndStep();
  EXPECT_THAT(EvictedBy(cache.Acquire(5, 0)), Optional(3));
  cache.EndStep();
  EXPECT_THAT(EvictedBy(cache.Acquire(6, 0)), Optional(1));
  EXPECT_EQ(cache.stats().evictions, 3);
}

TEST(DeviceSlotCacheTest, ScoreAwareEvictsTheLowestScoreThenTheLeastRecent) {
  DeviceSlotCache cache(4, kBlocks, std::make_unique<ScoreAwareEviction>());
  for (const int32_t block : {1, 2, 3, 4}) ASSERT_TRUE(cache.Acquire(block, 0).ok());
  cache.EndStep();
  cache.NoteScore(1, 0.5f);
  cache.NoteScore(2, 0.1f);
  cache.NoteScore(3, 0.1f);
  // Block 4 was never scored: +infinity, kept.
  cache.NoteScore(99, -5.0f);                                // not resident: ignored
  EXPECT_THAT(EvictedBy(cache.Acquire(5, 0)), Optional(2));  // 2 and 3 tie; 2 is older
  EXPECT_THAT(EvictedBy(cache.Acquire(6, 0)), Optional(3));
  EXPECT_THAT(EvictedBy(cache.Acquire(7, 0)), Optional(1));
  EXPECT_THAT(EvictedBy(cache.Acquire(8, 0)), Optional(4));
  EXPECT_EQ(cache.Acquire(9, 0).status().code(), absl::StatusCode::kResourceExhausted);
  cache.EndStep();
  cache.NoteScore(5, 3.0f);
  cache.NoteScore(6, kNan);  // NaN ranks as -infinity
  cache.NoteScore(7, -1e30f);
  EXPECT_THAT(EvictedBy(cache.Acquire(9, 0)), Optional(6));
  EXPECT_THAT(EvictedBy(cache.Acquire(10, 0)), Optional(7));
  EXPECT_THAT(EvictedBy(cache.Acquire(11, 0)), Optional(5));
  EXPECT_THAT(cache.block_in(*cache.slot_of(9)),
              Optional(testing::Field(&CachedBlock::score, kInf)));
}

TEST(DeviceSlotCacheTest, PinnedBlocksAreNeverEvictedAndPinsCount) {
  DeviceSlotCache cache(2, kBlocks, std::make_unique<LruEviction>());
  ASSERT_TRUE(cache.Acquire(1, 0).ok());
  ASSERT_TRUE(cache.Acquire(2, 0).ok());
  ASSERT_TRUE(cache.Pin(1).ok());
  ASSERT_TRUE(cache.Pin(1).ok());  // a sink in the window, say
  ASSERT_TRUE(cache.Pin(2).ok());
  cache.EndStep();
  EXPECT_EQ(cache.pins(1), 2);
  EXPECT_EQ(cache.Acquire(3, 0).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(cache.Unpin(1).ok());
  EXPECT_EQ(cache.Acquire(3, 0).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(cache.Unpin(1).ok());
  EXPECT_THAT(EvictedBy(cache.Acquire(3, 0)), Optional(1));
  EXPECT_EQ(cache.Unpin(3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache.Pin(1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache.Unpin(1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache.pins(1), 0);
}

TEST(DeviceSlotCacheTest, ForgetFreesTheSlotButNotWhileInUse) {
  DeviceSlotCache cache(2, kBlocks, std::make_unique<LruEviction>());
  ASSERT_TRUE(cache.Acquire(1, 0).ok());
  ASSERT_TRUE(cache.Acquire(2, 0).ok());
  ASSERT_TRUE(cache.Pin(2).ok());
  EXPECT_EQ(cache.Forget(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(cache.slot_of(1).has_value());
  cache.EndStep();
  ASSERT_TRUE(cache.Forget(2).ok());  // pinned, but its request ended
  EXPECT_EQ(cache.slot_of(2), std::nullopt);
  EXPECT_EQ(cache.num_free(), 1);
  EXPECT_TRUE(cache.Forget(2).ok());  // no longer resident: nothing to do
  EXPECT_TRUE(cache.Forget(-4).ok());
  const absl::StatusOr<SlotGrant> grant = cache.Acquire(3, 0);
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->slot, 1);
  EXPECT_EQ(grant->evicted, std::nullopt);  // a free slot goes first
  EXPECT_EQ(cache.pins(3), 0);
  EXPECT_EQ(cache.stats().evictions, 0);
}

TEST(DeviceSlotCacheTest, ForgetRequestDropsOnlyItsBlocksAndReturnsItsCounters) {
  DeviceSlotCache cache(4, kBlocks, std::make_unique<LruEviction>());
  EXPECT_EQ(cache.Lookup(1, 10), std::nullopt);
  ASSERT_TRUE(cache.Acquire(1, 10).ok());
  ASSERT_TRUE(cache.Acquire(2, 10).ok());
  EXPECT_EQ(cache.Lookup(3, 20), std::nullopt);
  ASSERT_TRUE(cache.Acquire(3, 20).ok());
  ASSERT_TRUE(cache.Pin(2).ok());
  const absl::StatusOr<CacheStats> refused = cache.ForgetRequest(10);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(cache.slot_of(1).has_value());
  EXPECT_TRUE(cache.slot_of(2).has_value());
  cache.EndStep();
  ASSERT_TRUE(cache.Lookup(3, 20).has_value());  // request 20's block in use: no matter
  const absl::StatusOr<CacheStats> stats = cache.ForgetRequest(10);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(*stats, (CacheStats{.misses = 1}));
  EXPECT_EQ(cache.request_stats(10), CacheStats{});
  EXPECT_EQ(cache.slot_of(1), std::nullopt);
  EXPECT_EQ(cache.slot_of(2), std::nullopt);
  EXPECT_THAT(cache.slot_of(3), Optional(2));
  EXPECT_EQ(cache.num_free(), 3);
  EXPECT_EQ(cache.stats(), (CacheStats{.hits = 1, .misses = 2}));
  const absl::StatusOr<CacheStats> unknown = cache.ForgetRequest(30);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(*unknown, CacheStats{});
}

TEST(DeviceSlotCacheTest, EvictionsCountForTheEvictedBlocksRequest) {
  DeviceSlotCache cache(1, kBlocks, std::make_unique<LruEviction>());
  ASSERT_TRUE(cache.Acquire(1, 10).ok());
  cache.EndStep();
  ASSERT_TRUE(cache.Acquire(2, 20).ok());
  EXPECT_EQ(cache.request_stats(10).evictions, 1);
  EXPECT_EQ(cache.request_stats(20).evictions, 0);
  EXPECT_THAT(cache.block_in(0), Optional(testing::Field(&CachedBlock::request_id, 20u)));
}

TEST(DeviceSlotCacheTest, AcquireRejectsBadBlocksChangingNothing) {
  DeviceSlotCache cache(2, kBlocks, std::make_unique<LruEviction>());
  ASSERT_TRUE(cache.Acquire(5, 0).ok());
  EXPECT_EQ(cache.Acquire(5, 0).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(cache.Acquire(-1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Acquire(kBlocks, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(cache.Lookup(kBlocks, 0).has_value());
  EXPECT_EQ(cache.num_free(), 1);
  DeviceSlotCache empty(0, kBlocks, std::make_unique<LruEviction>());
  EXPECT_EQ(empty.Acquire(0, 0).status().code(), absl::StatusCode::kResourceExhausted);
}

// --- Random operation sequences against a model. -------------------------------------------------

// The cache as plainly as it can be written: linear scans over the slots.
class CacheModel {
 public:
  CacheModel(int32_t num_slots, Policy policy)
      : slots_(static_cast<size_t>(num_slots)), policy_(policy) {
    for (int32_t slot = num_slots - 1; slot >= 0; --slot) free_.push_back(slot);
  }

  std::optional<int32_t> Lookup(int32_t block, uint64_t request) {
    const std::optional<int32_t> slot = SlotOf(block);
    if (!slot.has_value()) {
      ++total_.misses;
      ++requests_[request].misses;
      return std::nullopt;
    }
    ++total_.hits;
    ++requests_[request].hits;
    At(*slot).last_use = ++clock_;
    At(*slot).in_use = true;
    return slot;
  }

  absl::StatusCode Acquire(int32_t block, uint64_t request, SlotGrant* grant) {
    if (block < 0) return absl::StatusCode::kInvalidArgument;
    if (SlotOf(block).has_value()) return absl::StatusCode::kAlreadyExists;
    *grant = SlotGrant{};
    if (!free_.empty()) {
      grant->slot = free_.back();
      free_.pop_back();
    } else {
      std::optional<std::tuple<float, uint64_t, int32_t>> best;
      for (int32_t slot = 0; slot < num_slots(); ++slot) {
        const ModelSlot& s = At(slot);
        if (s.block < 0 || s.pins > 0 || s.in_use) continue;
        const float score = policy_ == Policy::kScoreAware ? s.score : 0.0f;
        const std::tuple<float, uint64_t, int32_t> key{score, s.last_use, slot};
        if (!best.has_value() || key < *best) best = key;
      }
      if (!best.has_value()) return absl::StatusCode::kResourceExhausted;
      grant->slot = std::get<2>(*best);
      ModelSlot& victim = At(grant->slot);
      grant->evicted = victim.block;
      ++total_.evictions;
      ++requests_[victim.request].evictions;
    }
    At(grant->slot) = ModelSlot{
        .block = block, .request = request, .in_use = true, .last_use = ++clock_, .score = kInf};
    return absl::StatusCode::kOk;
  }

  absl::StatusCode Pin(int32_t block) {
    const std::optional<int32_t> slot = SlotOf(block);
    if (!slot.has_value()) return absl::StatusCode::kNotFound;
    ++At(*slot).pins;
    return absl::StatusCode::kOk;
  }

  absl::StatusCode Unpin(int32_t block) {
    const std::optional<int32_t> slot = SlotOf(block);
    if (!slot.has_value()) return absl::StatusCode::kNotFound;
    if (At(*slot).pins == 0) return absl::StatusCode::kFailedPrecondition;
    --At(*slot).pins;
    return absl::StatusCode::kOk;
  }

  void NoteScore(int32_t block, float score) {
    const std::optional<int32_t> slot = SlotOf(block);
    if (slot.has_value()) At(*slot).score = std::isnan(score) ? -kInf : score;
  }

  absl::StatusCode Forget(int32_t block) {
    const std::optional<int32_t> slot = SlotOf(block);
    if (!slot.has_value()) return absl::StatusCode::kOk;
    if (At(*slot).in_use) return absl::StatusCode::kFailedPrecondition;
    At(*slot) = ModelSlot{};
    free_.push_back(*slot);
    return absl::StatusCode::kOk;
  }

  absl::StatusCode ForgetRequest(uint64_t request, CacheStats* stats) {
    for (const ModelSlot& s : slots_) {
      if (s.block >= 0 && s.request == request && s.in_use) {
        return absl::StatusCode::kFailedPrecondition;
      }
    }
    for (int32_t slot = 0; slot < num_slots(); ++slot) {
      if (At(slot).block >= 0 && At(slot).request == request) {
        At(slot) = ModelSlot{};
        free_.push_back(slot);
      }
    }
    *stats = requests_[request];
    requests_.erase(request);
    return absl::StatusCode::kOk;
  }

  void EndStep() {
    for (ModelSlot& s : slots_) s.in_use = false;
  }

  // Every observable of `cache` agrees with the model.
  void ExpectSameAs(const DeviceSlotCache& cache, int32_t max_block,
                    const std::vector<uint64_t>& requests) const {
    ASSERT_EQ(cache.num_free(), static_cast<int32_t>(free_.size()));
    int32_t evictable = 0;
    std::set<int32_t> resident;
    for (int32_t slot = 0; slot < num_slots(); ++slot) {
      const ModelSlot& s = At(slot);
      const std::optional<CachedBlock> block = cache.block_in(slot);
      ASSERT_EQ(block.has_value(), s.block >= 0) << "slot " << slot;
      if (!block.has_value()) continue;
      ASSERT_EQ(block->block, s.block) << "slot " << slot;
      ASSERT_TRUE(resident.insert(s.block).second) << "block " << s.block << " in two slots";
      ASSERT_EQ(block->request_id, s.request);
      ASSERT_EQ(block->score, s.score);
      ASSERT_EQ(cache.pins(s.block), s.pins);
      ASSERT_EQ(cache.in_use(s.block), s.in_use);
      if (s.pins == 0 && !s.in_use) ++evictable;
    }
    ASSERT_EQ(cache.num_evictable(), evictable);
    ASSERT_EQ(static_cast<int32_t>(resident.size()) + cache.num_free(), num_slots());
    for (int32_t block = -1; block <= max_block; ++block) {
      ASSERT_EQ(cache.slot_of(block), SlotOf(block)) << "block " << block;
    }
    ASSERT_EQ(cache.stats(), total_);
    for (const uint64_t request : requests) {
      const auto it = requests_.find(request);
      ASSERT_EQ(cache.request_stats(request), it == requests_.end() ? CacheStats{} : it->second)
          << "request " << request;
    }
  }

  int32_t num_slots() const { return static_cast<int32_t>(slots_.size()); }
  std::optional<int32_t> SlotOf(int32_t block) const {
    for (int32_t slot = 0; slot < num_slots(); ++slot) {
      if (block >= 0 && At(slot).block == block) return slot;
    }
    return std::nullopt;
  }
  const CacheStats& total() const { return total_; }

 private:
  struct ModelSlot {
    int32_t block = -1;
    uint64_t request = 0;
    int32_t pins = 0;
    bool in_use = false;
    uint64_t last_use = 0;
    float score = 0.0f;
  };
  ModelSlot& At(int32_t slot) { return slots_[static_cast<size_t>(slot)]; }
  const ModelSlot& At(int32_t slot) const { return slots_[static_cast<size_t>(slot)]; }

  std::vector<ModelSlot> slots_;
  std::vector<int32_t> free_;
  Policy policy_;
  uint64_t clock_ = 0;
  CacheStats total_;
  std::map<uint64_t, CacheStats> requests_;
};

CacheStats Sum(const CacheStats& a, const CacheStats& b) {
  return {a.hits + b.hits, a.misses + b.misses, a.evictions + b.evictions};
}

void RunRandomOperations(Policy policy, int32_t num_slots, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "slots " << num_slots << " seed " << seed << " policy "
                                  << (policy == Policy::kLru ? "lru" : "score-aware"));
  const int32_t max_block = 3 * num_slots + 3;
  DeviceSlotCache cache(num_slots, max_block + 1, MakePolicy(policy));
  CacheModel model(num_slots, policy);
  std::mt19937 rng(seed);
  const std::vector<uint64_t> requests = {100, 101, 102};
  // Blocks belong to requests, as host blocks do.
  const auto owner = [&](int32_t block) { return requests[static_cast<size_t>(block) % 3]; };
  CacheStats forgotten;   // counters handed back by ForgetRequest
  int32_t exhausted = 0;  // Acquire found every slot pinned or in use
  const std::vector<float> scores = {0.0f, 1.0f, 1.0f, 2.0f, -kInf, kInf, kNan, 0.5f};

  for (int32_t op = 0; op < 3000; ++op) {
    const int32_t block = static_cast<int32_t>(rng() % static_cast<uint32_t>(max_block + 2)) - 1;
    const uint32_t kind = rng() % 100;
    SCOPED_TRACE(testing::Message() << "op " << op << " kind " << kind << " block " << block);
    if (kind < 40) {  // the engine's pattern: look up, acquire on a miss
      const std::optional<int32_t> slot = cache.Lookup(block, owner(std::max(block, 0)));
      ASSERT_EQ(slot, model.Lookup(block, owner(std::max(block, 0))));
      if (!slot.has_value()) {
        const absl::StatusOr<SlotGrant> grant = cache.Acquire(block, owner(std::max(block, 0)));
        SlotGrant expected;
        ASSERT_EQ(grant.status().code(),
                  model.Acquire(block, owner(std::max(block, 0)), &expected));
        if (grant.ok()) {
          ASSERT_EQ(grant->slot, expected.slot);
          ASSERT_EQ(grant->evicted, expected.evicted);
        }
        if (grant.status().code() == absl::StatusCode::kResourceExhausted) ++exhausted;
      }
    } else if (kind < 45) {
      SlotGrant expected;
      ASSERT_EQ(cache.Acquire(block, 100).status().code(), model.Acquire(block, 100, &expected));
    } else if (kind < 57) {
      ASSERT_EQ(cache.Pin(block).code(), model.Pin(block));
    } else if (kind < 69) {
      ASSERT_EQ(cache.Unpin(block).code(), model.Unpin(block));
    } else if (kind < 79) {
      const float score = scores[rng() % scores.size()];
      cache.NoteScore(block, score);
      model.NoteScore(block, score);
    } else if (kind < 84) {
      ASSERT_EQ(cache.Forget(block).code(), model.Forget(block));
    } else if (kind < 86) {
      const uint64_t request = requests[rng() % 3];
      const absl::StatusOr<CacheStats> stats = cache.ForgetRequest(request);
      CacheStats expected;
      ASSERT_EQ(stats.status().code(), model.ForgetRequest(request, &expected));
      if (stats.ok()) {
        ASSERT_EQ(*stats, expected);
        forgotten = Sum(forgotten, *stats);
      }
    } else {
      cache.EndStep();
      model.EndStep();
    }
    ASSERT_NO_FATAL_FAILURE(model.ExpectSameAs(cache, max_block, requests));
    // The counters add up: per request (with those handed back) to the totals.
    CacheStats sum = forgotten;
    for (const uint64_t request : requests) sum = Sum(sum, cache.request_stats(request));
    ASSERT_EQ(sum, cache.stats());
  }
  // The sequence reached the states worth checking.
  if (num_slots > 0) {
    EXPECT_GT(cache.stats().hits, 0);
    EXPECT_GT(cache.stats().evictions, 0);
    EXPECT_GT(exhausted, 0);
  }
}

TEST(DeviceSlotCacheTest, RandomOperationsMatchTheModelLru) {
  for (const int32_t num_slots : {0, 1, 2, 5, 16}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      ASSERT_NO_FATAL_FAILURE(RunRandomOperations(Policy::kLru, num_slots, seed));
    }
  }
}

TEST(DeviceSlotCacheTest, RandomOperationsMatchTheModelScoreAware) {
  for (const int32_t num_slots : {0, 1, 2, 5, 16}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      ASSERT_NO_FATAL_FAILURE(RunRandomOperations(Policy::kScoreAware, num_slots, seed));
    }
  }
}

}  // namespace
}  // namespace pulse
