#include "core/tokenizer/bpe_merge.h"

#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

TEST(ApplyMerges, LowestRankFirst) {
  // a=0 b=1 c=2; "ab"=3 (rank 1), "bc"=4 (rank 0): "abc" becomes a + bc.
  const MergeTable merges = {{MergeKey(0, 1), {1, 3}}, {MergeKey(1, 2), {0, 4}}};
  std::vector<int32_t> symbols = {0, 1, 2};
  ApplyMerges(merges, symbols);
  EXPECT_EQ(symbols, (std::vector<int32_t>{0, 4}));
}

TEST(ApplyMerges, LeftmostOfEqualRanksFirst) {
  // "aaa" with aa=1: the left pair merges, the third a stays.
  const MergeTable merges = {{MergeKey(0, 0), {0, 1}}};
  std::vector<int32_t> symbols = {0, 0, 0};
  ApplyMerges(merges, symbols);
  EXPECT_EQ(symbols, (std::vector<int32_t>{1, 0}));
}

TEST(ApplyMerges, MergedSymbolsMergeFurther) {
  // a=0, aa=1 (rank 0), aaaa=2 (rank 1).
  const MergeTable merges = {{MergeKey(0, 0), {0, 1}}, {MergeKey(1, 1), {1, 2}}};
  std::vector<int32_t> symbols(10, 0);
  ApplyMerges(merges, symbols);
  EXPECT_EQ(symbols, (std::vector<int32_t>{2, 2, 1}));
}

TEST(ApplyMerges, NegativeIdsNeverMerge) {
  const MergeTable merges = {{MergeKey(0, 0), {0, 1}}};
  std::vector<int32_t> symbols = {0, -1, 0, 0};
  ApplyMerges(merges, symbols);
  EXPECT_EQ(symbols, (std::vector<int32_t>{0, -1, 1}));
}

TEST(ApplyMerges, LongInputIsLinearithmic) {
  // 2^20 equal symbols with merges doubling them: one token of 2^20 symbols at the end.
  MergeTable merges;
  for (int32_t level = 0; level < 20; ++level) merges[MergeKey(level, level)] = {level, level + 1};
  std::vector<int32_t> symbols(1 << 20, 0);
  ApplyMerges(merges, symbols);
  EXPECT_EQ(symbols, (std::vector<int32_t>{20}));
}

}  // namespace
}  // namespace pulse
