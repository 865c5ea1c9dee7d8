// BlockPool's sharing and prefix cache: holders, cached blocks kept unreferenced and taken back,
// the least recently released taken when an allocation needs room, keys checked in full; and a
// random sequence of operations against a reference model of the same rules.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "core/kv/block_key.h"
#include "core/kv/block_pool.h"
#include "core/kv/block_table.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

// A key of its own for each (token, parent).
BlockKey Key(int32_t token, uint64_t parent = 0) {
  return {.hash = (parent * 1000003 + static_cast<uint64_t>(token)) | 1,
          .parent = parent,
          .tokens = {token, token + 1}};
}

TEST(BlockKeyTest, KeysChainTheBlocksAndIgnoreAPartialLastOne) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<BlockKey> keys = FullBlockKeys(tokens, 3);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].parent, 0u);
  EXPECT_EQ(keys[1].parent, keys[0].hash);
  EXPECT_EQ(keys[1].tokens, (std::vector<int32_t>{4, 5, 6}));
  // The same block after another prefix is another key.
  const std::vector<int32_t> other = {9, 2, 3, 4, 5, 6};
  EXPECT_NE(FullBlockKeys(other, 3)[1].hash, keys[1].hash);
  EXPECT_EQ(FullBlockKeys(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, 3), keys);
  EXPECT_TRUE(FullBlockKeys(tokens, 0).empty());
}

TEST(BlockSharingTest, ABlockIsFreedWithItsLastHolder) {
  BlockPool pool(3, /*track_released=*/true);
  ASSERT_TRUE(pool.Reserve(1).ok());
  const int32_t block = *pool.Allocate();
  ASSERT_TRUE(pool.Share(block).ok());
  EXPECT_EQ(pool.holders(block), 2);
  ASSERT_TRUE(pool.Free(block).ok());
  EXPECT_EQ(pool.available(), 2);
  EXPECT_TRUE(pool.TakeReleased().empty());
  ASSERT_TRUE(pool.Free(block).ok());
  EXPECT_EQ(pool.available(), 3);
  EXPECT_EQ(pool.TakeReleased(), std::vector<int32_t>{block});
  EXPECT_EQ(pool.Free(block).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Share(block).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockSharingTest, CachedBlocksStayUntilAnAllocationNeedsTheirRoom) {
  BlockPool pool(3);
  ASSERT_TRUE(pool.Reserve(3).ok());
  const int32_t a = *pool.Allocate();
  const int32_t b = *pool.Allocate();
  const int32_t c = *pool.Allocate();
  EXPECT_TRUE(pool.Cache(a, Key(10)));
  EXPECT_TRUE(pool.Cache(b, Key(20)));
  EXPECT_FALSE(pool.Cache(c, Key(10)));  // the key has a block
  EXPECT_FALSE(pool.Cache(a, Key(30)));  // the block has a key
  EXPECT_EQ(pool.cached(), 2);
  // Released: b first, then a; both stay cached and count as available.
  ASSERT_TRUE(pool.Free(b).ok());
  ASSERT_TRUE(pool.Free(a).ok());
  EXPECT_EQ(pool.available(), 2);
  EXPECT_EQ(pool.cached_unreferenced(), 2);
  EXPECT_EQ(pool.Find(Key(20)), b);
  // A key with the same hash and other tokens is not the block's.
  BlockKey forged = Key(20);
  forged.tokens[0] = 99;
  EXPECT_EQ(pool.Find(forged), std::nullopt);
  // An allocation takes the least recently released cached block: b, whose key goes.
  ASSERT_TRUE(pool.Reserve(1).ok());
  EXPECT_EQ(*pool.Allocate(), b);
  EXPECT_EQ(pool.Find(Key(20)), std::nullopt);
  EXPECT_EQ(pool.Find(Key(10)), a);
  // Taken back by its key: held again, no longer available.
  ASSERT_TRUE(pool.Share(a).ok());
  EXPECT_EQ(pool.available(), 0);
  EXPECT_EQ(pool.holders(a), 1);
  ASSERT_TRUE(pool.Free(a).ok());
  // Nothing available: a cached block cannot be taken back past the reservations.
  ASSERT_TRUE(pool.Reserve(1).ok());
  EXPECT_EQ(pool.Share(a).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.cached_unreferenced(), 1);
}

TEST(BlockSharingTest, ATableSharingAPrefixHoldsItAndReservesTheRest) {
  BlockPool pool(6);
  std::optional<BlockTable> first = *BlockTable::Create(&pool, 4, 12);
  ASSERT_TRUE(first->Grow(8).ok());
  const std::vector<int32_t> prefix(first->blocks().begin(), first->blocks().end());
  absl::StatusOr<BlockTable> second = BlockTable::CreateSharing(&pool, 4, 12, prefix);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(std::vector<int32_t>(second->blocks().begin(), second->blocks().end()), prefix);
  EXPECT_EQ(pool.available(), 6 - 3 - 1);
  // A third cannot reserve the three blocks past the prefix; a prefix longer than a table's
  // worst case is refused. Neither keeps a share.
  EXPECT_EQ(BlockTable::CreateSharing(&pool, 4, 20, prefix).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(BlockTable::CreateSharing(&pool, 4, 4, prefix).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.holders(prefix[0]), 2);
  first.reset();
  EXPECT_EQ(pool.holders(prefix[0]), 1);
  EXPECT_EQ(pool.available(), 6 - 3);
  second = absl::InternalError("released");
  EXPECT_EQ(pool.available(), 6);
}

// The reference: a map of holders and the cache's keys and release order.
class ReferencePool {
 public:
  explicit ReferencePool(int32_t capacity) : capacity_(capacity) {}
  int32_t available() const {
    int32_t free = 0;
    for (int32_t b = 0; b < capacity_; ++b) free += holders(b) == 0 ? 1 : 0;
    return free - reserved_;
  }
  int32_t holders(int32_t b) const { return held_.contains(b) ? held_.at(b) : 0; }
  bool keyed(int32_t b) const { return key_of_.contains(b); }

  int32_t reserved_ = 0;
  std::map<int32_t, int32_t> held_;
  std::map<int32_t, uint64_t> key_of_;
  std::vector<int32_t> released_order_;  // cached unreferenced blocks, least recent first

 private:
  int32_t capacity_;
};

TEST(BlockSharingTest, RandomOperationsFollowTheReferenceModel) {
  constexpr int32_t kCapacity = 12;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    BlockPool pool(kCapacity, /*track_released=*/true);
    ReferencePool model(kCapacity);
    std::vector<int32_t> handles;  // one entry a holder
    for (int step = 0; step < 400; ++step) {
      switch (rng() % 5) {
        case 0: {  // reserve and allocate one
          const int32_t ids = pool.IdsToHold(1);
          if (!pool.Reserve(1).ok()) {
            EXPECT_EQ(model.available(), 0);
            break;
          }
          const int32_t block = *pool.Allocate();
          EXPECT_LT(block, ids) << seed << " " << step;  // the host tier pins that far
          // A free block if any, else the least recently released cached one.
          bool any_free = false;
          for (int32_t b = 0; b < kCapacity; ++b) {
            any_free = any_free || (model.holders(b) == 0 && !model.keyed(b));
          }
          if (any_free) {
            EXPECT_FALSE(model.keyed(block)) << seed << " " << step;
          } else {
            ASSERT_FALSE(model.released_order_.empty());
            EXPECT_EQ(block, model.released_order_.front()) << seed << " " << step;
            model.released_order_.erase(model.released_order_.begin());
            model.key_of_.erase(block);
          }
          EXPECT_EQ(model.holders(block), 0);
          model.held_[block] = 1;
          handles.push_back(block);
          break;
        }
        case 1: {  // a holder lets go
          if (handles.empty()) break;
          const size_t i = rng() % handles.size();
          const int32_t block = handles[i];
          handles.erase(handles.begin() + static_cast<ptrdiff_t>(i));
          ASSERT_TRUE(pool.Free(block).ok());
          if (--model.held_[block] == 0) {
            model.held_.erase(block);
            if (model.keyed(block)) model.released_order_.push_back(block);
          }
          break;
        }
        case 2: {  // share a held block
          if (handles.empty()) break;
          const int32_t block = handles[rng() % handles.size()];
          ASSERT_TRUE(pool.Share(block).ok());
          ++model.held_[block];
          handles.push_back(block);
          break;
        }
        case 3: {  // cache a held block under a fresh key
          if (handles.empty()) break;
          const int32_t block = handles[rng() % handles.size()];
          const BlockKey key = Key(static_cast<int32_t>(rng() % 1000), 7);
          const bool known = std::any_of(model.key_of_.begin(), model.key_of_.end(),
                                         [&](const auto& e) { return e.second == key.hash; });
          const bool cached = pool.Cache(block, key);
          EXPECT_EQ(cached, !known && !model.keyed(block)) << seed << " " << step;
          if (cached) model.key_of_[block] = key.hash;
          break;
        }
        case 4: {  // take a cached unreferenced block back by its key
          if (model.released_order_.empty()) break;
          const int32_t block = model.released_order_[rng() % model.released_order_.size()];
          ASSERT_TRUE(pool.Share(block).ok() == (model.available() >= 1)) << seed << " " << step;
          if (model.available() < 1) break;
          model.released_order_.erase(
              std::find(model.released_order_.begin(), model.released_order_.end(), block));
          model.held_[block] = 1;
          handles.push_back(block);
          break;
        }
      }
      ASSERT_EQ(pool.available(), model.available()) << seed << " " << step;
      ASSERT_EQ(pool.cached(), static_cast<int32_t>(model.key_of_.size()));
      ASSERT_EQ(pool.cached_unreferenced(), static_cast<int32_t>(model.released_order_.size()));
      for (int32_t b = 0; b < kCapacity; ++b) {
        ASSERT_EQ(pool.holders(b), model.holders(b));
        if (model.holders(b) > 0 || model.keyed(b)) ASSERT_LT(b, pool.IdsToHold(0));
      }
    }
    // Every holder lets go: nothing is held, the cached blocks stay available.
    for (const int32_t block : handles) ASSERT_TRUE(pool.Free(block).ok());
    for (int32_t b = 0; b < kCapacity; ++b) EXPECT_EQ(pool.holders(b), 0);
    EXPECT_EQ(pool.available(), kCapacity);
    pool.TakeReleased();
  }
}

}  // namespace
}  // namespace pulse
