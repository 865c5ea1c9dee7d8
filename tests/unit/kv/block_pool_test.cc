#include "core/kv/block_pool.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

using ::testing::HasSubstr;

TEST(BlockPoolTest, FreshPoolHasEverythingAvailable) {
  BlockPool pool(4);
  EXPECT_EQ(pool.capacity(), 4);
  EXPECT_EQ(pool.available(), 4);
  EXPECT_EQ(pool.reserved(), 0);
  EXPECT_EQ(pool.allocated(), 0);
}

TEST(BlockPoolTest, AllocateNeedsAReservation) {
  BlockPool pool(4);
  const absl::StatusOr<int32_t> block = pool.Allocate();
  EXPECT_EQ(block.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(block.status().message(), HasSubstr("reserved"));
}

TEST(BlockPoolTest, ReserveAllocateFreeKeepsTheCounts) {
  BlockPool pool(5);
  ASSERT_TRUE(pool.Reserve(3).ok());
  EXPECT_EQ(pool.available(), 2);
  EXPECT_EQ(pool.reserved(), 3);

  const absl::StatusOr<int32_t> a = pool.Allocate();
  const absl::StatusOr<int32_t> b = pool.Allocate();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(pool.reserved(), 1);
  EXPECT_EQ(pool.allocated(), 2);
  EXPECT_EQ(pool.available(), 2);

  ASSERT_TRUE(pool.Free(*a).ok());
  EXPECT_EQ(pool.allocated(), 1);
  EXPECT_EQ(pool.available(), 3);
  ASSERT_TRUE(pool.Unreserve(1).ok());
  EXPECT_EQ(pool.available(), 4);
}

TEST(BlockPoolTest, ReserveBeyondAvailableIsResourceExhausted) {
  BlockPool pool(4);
  ASSERT_TRUE(pool.Reserve(3).ok());
  const absl::Status status = pool.Reserve(2);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("1 of 4 are available"));
  // A failed reservation changes nothing.
  EXPECT_EQ(pool.reserved(), 3);
  EXPECT_TRUE(pool.Reserve(1).ok());
  EXPECT_EQ(pool.available(), 0);
}

TEST(BlockPoolTest, BadCountsAreInvalidArgument) {
  BlockPool pool(4);
  EXPECT_EQ(pool.Reserve(-1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(pool.Reserve(2).ok());
  EXPECT_EQ(pool.Unreserve(3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Unreserve(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.reserved(), 2);
}

TEST(BlockPoolTest, DoubleFreeAndForeignIdsAreRejected) {
  BlockPool pool(3);
  ASSERT_TRUE(pool.Reserve(1).ok());
  const absl::StatusOr<int32_t> block = pool.Allocate();
  ASSERT_TRUE(block.ok());
  ASSERT_TRUE(pool.Free(*block).ok());
  const absl::Status twice = pool.Free(*block);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.message(), HasSubstr("not allocated"));
  EXPECT_EQ(pool.Free(3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Free(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.available(), 3);
}

TEST(BlockPoolTest, NeverHandsOutABlockTwice) {
  constexpr int32_t kCapacity = 16;
  BlockPool pool(kCapacity);
  std::set<int32_t> live;
  // A fixed interleaving of allocations and frees that cycles every block several times.
  for (int32_t round = 0; round < 200; ++round) {
    if (live.size() < kCapacity && (round % 3 != 2 || live.empty())) {
      ASSERT_TRUE(pool.Reserve(1).ok());
      const absl::StatusOr<int32_t> block = pool.Allocate();
      ASSERT_TRUE(block.ok());
      ASSERT_GE(*block, 0);
      ASSERT_LT(*block, kCapacity);
      ASSERT_TRUE(live.insert(*block).second) << "block " << *block << " handed out twice";
    } else {
      const int32_t victim = *std::next(live.begin(), round % static_cast<int32_t>(live.size()));
      ASSERT_TRUE(pool.Free(victim).ok());
      live.erase(victim);
    }
    ASSERT_EQ(pool.allocated(), static_cast<int32_t>(live.size()));
  }
}

TEST(BlockPoolTest, ExhaustedPoolRecoversAfterFree) {
  BlockPool pool(2);
  ASSERT_TRUE(pool.Reserve(2).ok());
  const int32_t a = *pool.Allocate();
  const int32_t b = *pool.Allocate();
  EXPECT_EQ(pool.Reserve(1).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(pool.Free(b).ok());
  ASSERT_TRUE(pool.Reserve(1).ok());
  EXPECT_EQ(*pool.Allocate(), b);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace pulse
