#include "core/kv/block_table.h"

#include <set>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

TEST(BlocksForTokensTest, RoundsUp) {
  EXPECT_EQ(BlocksForTokens(0, 4), 0);
  EXPECT_EQ(BlocksForTokens(1, 4), 1);
  EXPECT_EQ(BlocksForTokens(4, 4), 1);
  EXPECT_EQ(BlocksForTokens(5, 4), 2);
}

TEST(BlockTableTest, CreateReservesTheWorstCase) {
  BlockPool pool(10);
  absl::StatusOr<BlockTable> table = BlockTable::Create(&pool, 4, 9);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(pool.reserved(), 3);
  EXPECT_EQ(pool.allocated(), 0);
  EXPECT_TRUE(table->blocks().empty());
  EXPECT_EQ(table->max_tokens(), 9);
}

TEST(BlockTableTest, GrowsBlockByBlock) {
  BlockPool pool(10);
  BlockTable table = *BlockTable::Create(&pool, 4, 9);
  ASSERT_TRUE(table.Grow(1).ok());
  EXPECT_EQ(table.blocks().size(), 1u);
  ASSERT_TRUE(table.Grow(4).ok());
  EXPECT_EQ(table.blocks().size(), 1u);
  ASSERT_TRUE(table.Grow(5).ok());
  EXPECT_EQ(table.blocks().size(), 2u);
  EXPECT_EQ(table.capacity_tokens(), 8);
  ASSERT_TRUE(table.Grow(3).ok());  // shrinking is a no-op
  EXPECT_EQ(table.blocks().size(), 2u);
  EXPECT_EQ(pool.reserved(), 1);
  EXPECT_EQ(pool.allocated(), 2);
}

TEST(BlockTableTest, GrowBeyondTheReservationIsOutOfRange) {
  BlockPool pool(10);
  BlockTable table = *BlockTable::Create(&pool, 4, 9);
  const absl::Status status = table.Grow(10);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(), ::testing::HasSubstr("reserved for 9 tokens"));
  EXPECT_TRUE(table.blocks().empty());
}

TEST(BlockTableTest, CreateFailsWhenThePoolCannotCoverIt) {
  BlockPool pool(3);
  BlockTable first = *BlockTable::Create(&pool, 4, 8);
  const absl::StatusOr<BlockTable> second = BlockTable::Create(&pool, 4, 8);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.reserved(), 2);
}

TEST(BlockTableTest, DestructionReturnsBlocksAndReservation) {
  BlockPool pool(6);
  {
    BlockTable table = *BlockTable::Create(&pool, 2, 10);
    ASSERT_TRUE(table.Grow(3).ok());
    EXPECT_EQ(pool.available(), 1);
  }
  EXPECT_EQ(pool.available(), 6);
  EXPECT_EQ(pool.allocated(), 0);
  EXPECT_EQ(pool.reserved(), 0);
}

TEST(BlockTableTest, MoveTransfersOwnership) {
  BlockPool pool(6);
  BlockTable a = *BlockTable::Create(&pool, 2, 4);
  ASSERT_TRUE(a.Grow(4).ok());
  BlockTable b = std::move(a);
  EXPECT_EQ(b.blocks().size(), 2u);
  EXPECT_EQ(pool.allocated(), 2);
  BlockTable c = *BlockTable::Create(&pool, 2, 2);
  c = std::move(b);  // c's own reservation goes back; b's blocks now belong to c
  EXPECT_EQ(pool.allocated(), 2);
  EXPECT_EQ(pool.reserved(), 0);
  EXPECT_EQ(pool.available(), 4);
}

TEST(BlockTableTest, TablesNeverShareABlock) {
  BlockPool pool(12);
  BlockTable a = *BlockTable::Create(&pool, 4, 24);
  BlockTable b = *BlockTable::Create(&pool, 4, 24);
  std::set<int32_t> seen;
  for (int32_t tokens = 1; tokens <= 24; ++tokens) {
    ASSERT_TRUE(a.Grow(tokens).ok());
    ASSERT_TRUE(b.Grow(tokens).ok());
  }
  for (const int32_t block : a.blocks()) EXPECT_TRUE(seen.insert(block).second);
  for (const int32_t block : b.blocks()) EXPECT_TRUE(seen.insert(block).second);
  EXPECT_EQ(seen.size(), 12u);
}

TEST(BlockTableTest, DetachHandsOverTheBlocksAndAdoptTakesThemBack) {
  BlockPool pool(10);
  absl::StatusOr<BlockTable> table = BlockTable::Create(&pool, 4, 20);
  ASSERT_TRUE(table.ok());
  ASSERT_TRUE(table->Grow(9).ok());
  std::vector<int32_t> blocks = table->Detach();
  EXPECT_EQ(blocks.size(), 3u);
  EXPECT_TRUE(table->blocks().empty());
  // The blocks stay allocated; the rest of the reservation went back.
  EXPECT_EQ(pool.allocated(), 3);
  EXPECT_EQ(pool.reserved(), 0);
  // Adopted with too little reserved for the worst case: refused, nothing taken.
  ASSERT_TRUE(pool.Reserve(1).ok());
  EXPECT_EQ(BlockTable::Adopt(&pool, 4, 20, blocks, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pool.Reserve(1).ok());
  absl::StatusOr<BlockTable> adopted = BlockTable::Adopt(&pool, 4, 20, blocks, 2);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_THAT(adopted->blocks(), ::testing::ElementsAreArray(blocks));
  ASSERT_TRUE(adopted->Grow(20).ok());
  EXPECT_EQ(pool.allocated(), 5);
  adopted = absl::InternalError("dropped");  // destroys the table
  EXPECT_EQ(pool.allocated(), 0);
  EXPECT_EQ(pool.reserved(), 0);
}

}  // namespace
}  // namespace pulse
