#include "core/offload/selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

BlockSelector MakeSelector(const SelectionOptions& options, int32_t block_tokens = 4,
                           int32_t num_kv_heads = 1, int32_t num_query_heads = 1) {
  const PagedKvLayout layout{
      .block_tokens = block_tokens, .num_kv_heads = num_kv_heads, .head_dim = 4};
  absl::StatusOr<BlockSelector> selector = BlockSelector::Create(layout, num_query_heads, options);
  EXPECT_TRUE(selector.ok()) << selector.status();
  return *std::move(selector);
}

std::vector<int32_t> Range(int32_t begin, int32_t end) {
  std::vector<int32_t> blocks(static_cast<size_t>(std::max(end - begin, 0)));
  std::iota(blocks.begin(), blocks.end(), begin);
  return blocks;
}

// Solohead selection over one query head with these scores for the candidates.
std::vector<int32_t> SelectOne(const BlockSelector& selector, int32_t num_tokens,
                               const std::vector<float>& scores) {
  const absl::StatusOr<BlockSelection> selection = selector.Select(num_tokens, scores);
  EXPECT_TRUE(selection.ok()) << selection.status();
  if (!selection.ok()) return {};
  EXPECT_EQ(selection->num_sets, 1);
  const std::span<const int32_t> set = selection->set(0);
  return {set.begin(), set.end()};
}

// --- The partition, token by token. --------------------------------------------------------------

// The model: a block is forced when it holds a sink token or a window token, or is the partial
// tail; tokens are counted one by one.
struct ModelPartition {
  std::vector<bool> forced;
  int32_t forced_tokens = 0;
};

ModelPartition ModelPartitionOf(int32_t num_tokens, int32_t block_tokens,
                                const SelectionOptions& options) {
  const int32_t num_blocks = (num_tokens + block_tokens - 1) / block_tokens;
  ModelPartition model{.forced = std::vector<bool>(static_cast<size_t>(num_blocks), false)};
  for (int32_t t = 0; t < num_tokens; ++t) {
    const int32_t block = t / block_tokens;
    const bool partial_tail = block == num_blocks - 1 && num_tokens % block_tokens != 0;
    if (t < options.sink_tokens || t >= num_tokens - options.window_tokens || partial_tail) {
      model.forced[static_cast<size_t>(block)] = true;
    }
  }
  for (int32_t t = 0; t < num_tokens; ++t) {
    if (model.forced[static_cast<size_t>(t / block_tokens)]) ++model.forced_tokens;
  }
  return model;
}

TEST(BlockSelectorTest, PartitionMatchesTheTokenModel) {
  for (const int32_t block_tokens : {1, 3, 4, 32}) {
    for (int32_t num_tokens = 0; num_tokens <= 5 * block_tokens + 2; ++num_tokens) {
      for (const int32_t sink : {0, 1, block_tokens, block_tokens + 1, 1000}) {
        for (const int32_t window : {0, 1, block_tokens - 1, 2 * block_tokens + 1, 1000}) {
          for (const int32_t budget : {0, 5, 3 * block_tokens, num_tokens, 1 << 30}) {
            const SelectionOptions options{
                .budget_tokens = budget, .sink_tokens = sink, .window_tokens = window};
            if (sink == 0 && window == 0 && budget < block_tokens) {
              continue;  // refused: it may attend to nothing (NoSinkNoWindow... below)
            }
            const BlockSelector selector = MakeSelector(options, block_tokens);
            const absl::StatusOr<BlockPartition> partition = selector.Partition(num_tokens);
            ASSERT_TRUE(partition.ok());
            const ModelPartition model = ModelPartitionOf(num_tokens, block_tokens, options);
            SCOPED_TRACE(testing::Message()
                         << "T=" << block_tokens << " n=" << num_tokens << " sink=" << sink
                         << " window=" << window << " budget=" << budget);
            ASSERT_EQ(partition->num_blocks, static_cast<int32_t>(model.forced.size()));
            for (int32_t block = 0; block < partition->num_blocks; ++block) {
              const bool candidate =
                  block >= partition->sink_end && block < partition->window_begin;
              ASSERT_EQ(candidate, !model.forced[static_cast<size_t>(block)]) << "block " << block;
            }
            // Candidates are full blocks; the most of them that fit next to the forced tokens.
            const int32_t room = std::max(budget - model.forced_tokens, 0);
            ASSERT_EQ(partition->picks, std::min(room / block_tokens, partition->num_candidates()));
            ASSERT_EQ(partition->selected_tokens,
                      model.forced_tokens + partition->picks * block_tokens);
            if (budget >= num_tokens) {
              ASSERT_EQ(partition->selected_tokens, num_tokens);
            }
            ASSERT_LE(partition->selected_tokens, std::max(budget, model.forced_tokens));
          }
        }
      }
    }
  }
}

TEST(BlockSelectorTest, SinksAndWindowRoundToWholeBlocks) {
  // T = 4, 10 tokens: blocks 0 [0,4), 1 [4,8), 2 [8,10) (partial tail).
  const SelectionOptions window3{.budget_tokens = 0, .sink_tokens = 1, .window_tokens = 3};
  EXPECT_THAT(SelectOne(MakeSelector(window3), 10, {}), ElementsAre(0, 1, 2));
  const SelectionOptions window2{.budget_tokens = 0, .sink_tokens = 0, .window_tokens = 2};
  EXPECT_THAT(SelectOne(MakeSelector(window2), 10, {0.0f, 0.0f}), ElementsAre(2));
  const SelectionOptions sink5{.budget_tokens = 0, .sink_tokens = 5, .window_tokens = 0};
  EXPECT_THAT(SelectOne(MakeSelector(sink5), 10, {}), ElementsAre(0, 1, 2));
  // A full last block is not forced without a window: it is a candidate, which a budget of a
  // block may pick.
  const SelectionOptions one_block{.budget_tokens = 4, .sink_tokens = 0, .window_tokens = 0};
  EXPECT_THAT(SelectOne(MakeSelector(one_block), 8, {0.0f, 1.0f}), ElementsAre(1));
  EXPECT_THAT(SelectOne(MakeSelector(one_block), 9, {0.0f, 1.0f}), ElementsAre(2));
}

// No sink, no window and a budget below a block pick nothing when the newest token fills its
// block: the query would attend to nothing (the ABI fuzzer found the NaN logits this gave).
TEST(BlockSelectorTest, NoSinkNoWindowAndLessThanABlockOfBudgetIsRefused) {
  for (const int32_t budget : {0, 3}) {
    const absl::Status status =
        BlockSelector::Create({.block_tokens = 4, .num_kv_heads = 1, .head_dim = 4}, 1,
                              {.budget_tokens = budget, .sink_tokens = 0, .window_tokens = 0})
            .status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("may attend to nothing"));
  }
}

TEST(BlockSelectorTest, ForcedBlocksBeyondTheBudgetAreStillAllSelected) {
  const SelectionOptions options{.budget_tokens = 6, .sink_tokens = 8, .window_tokens = 9};
  const BlockSelector selector = MakeSelector(options);
  // 40 tokens: sinks 0-1, window 7-9 (tokens 31..39), candidates 2-6 get nothing.
  const absl::StatusOr<BlockPartition> partition = selector.Partition(40);
  ASSERT_TRUE(partition.ok());
  EXPECT_EQ(partition->picks, 0);
  EXPECT_EQ(partition->selected_tokens, 20);
  EXPECT_THAT(SelectOne(selector, 40, {5, 4, 3, 2, 1}), ElementsAre(0, 1, 7, 8, 9));
}

TEST(BlockSelectorTest, EmptyAndShortSequences) {
  const SelectionOptions options{.budget_tokens = 0, .sink_tokens = 4, .window_tokens = 4};
  const BlockSelector selector = MakeSelector(options);
  EXPECT_THAT(SelectOne(selector, 0, {}), IsEmpty());
  EXPECT_THAT(SelectOne(selector, 3, {}), ElementsAre(0));
  // Sinks and window overlap: each block once, each token counted once.
  const absl::StatusOr<BlockPartition> partition = selector.Partition(8);
  ASSERT_TRUE(partition.ok());
  EXPECT_EQ(partition->selected_tokens, 8);
  EXPECT_THAT(SelectOne(selector, 8, {}), ElementsAre(0, 1));
}

TEST(BlockSelectorTest, NonResidentBlocksLieBetweenSinksAndWindowBeforeTheWrittenBlock) {
  const SelectionOptions options{.budget_tokens = 64, .sink_tokens = 16, .window_tokens = 32};
  // Writing token 300 (block 18): sinks are block 0, the window starts at token 269 (block 16).
  const BlockRange far = NonResidentBlocks(300, 16, options);
  EXPECT_EQ(far.begin, 1);
  EXPECT_EQ(far.end, 16);
  // A short sequence: its window reaches the sinks, so every block stays.
  const BlockRange near = NonResidentBlocks(20, 16, options);
  EXPECT_EQ(near.begin, near.end);
  // A window shorter than a block: the block written still stays.
  const BlockRange tight =
      NonResidentBlocks(47, 16, {.budget_tokens = 64, .sink_tokens = 16, .window_tokens = 1});
  EXPECT_EQ(tight.begin, 1);
  EXPECT_EQ(tight.end, 2);
}

TEST(BlockSelectorTest, PicksTheBestScoresAndReturnsThemInOrder) {
  const SelectionOptions options{
      .budget_tokens = 4 + 3 * 4 + 4, .sink_tokens = 1, .window_tokens = 1, .logit_scale = 1.0f};
  // 40 tokens: block 0 sink, block 9 window, candidates 1..8, three picks.
  const BlockSelector selector = MakeSelector(options);
  EXPECT_THAT(SelectOne(selector, 40, {0, 9, 1, 7, 2, 8, 3, 4}), ElementsAre(0, 2, 4, 6, 9));
}

TEST(BlockSelectorTest, TiesGoToTheLowerBlockAndNanRanksLast) {
  const SelectionOptions options{
      .aggregate = HeadAggregate::kMax, .budget_tokens = 12, .sink_tokens = 0, .window_tokens = 0};
  const BlockSelector selector = MakeSelector(options);
  // 6 full blocks, 3 picks.
  EXPECT_THAT(SelectOne(selector, 24, {1, 1, 1, 1, 1, 1}), ElementsAre(0, 1, 2));
  EXPECT_THAT(SelectOne(selector, 24, {0, 2, 1, 2, 1, 2}), ElementsAre(1, 3, 5));
  EXPECT_THAT(SelectOne(selector, 24, {kNan, 0, kNan, -1, kNan, -5}), ElementsAre(1, 3, 5));
  EXPECT_THAT(SelectOne(selector, 24, {kNan, kNan, 3, kNan, kNan, kNan}), ElementsAre(0, 1, 2));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THAT(SelectOne(selector, 24, {-inf, 0, inf, kNan, -inf, -inf}), ElementsAre(0, 1, 2));
  // -0 and +0 are equal scores: the lower blocks win.
  EXPECT_THAT(SelectOne(selector, 24, {-1, -0.0f, -2, 0.0f, -0.0f, 0.0f}), ElementsAre(1, 3, 4));
}

TEST(BlockSelectorTest, BudgetCoveringTheContextSelectsEveryBlock) {
  std::mt19937 rng(1);
  for (const HeadAggregate aggregate : {HeadAggregate::kSoftmaxSum, HeadAggregate::kMax}) {
    for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
      for (const int32_t num_tokens : {1, 31, 32, 33, 100, 1000}) {
        const SelectionOptions options{.mode = mode,
                                       .aggregate = aggregate,
                                       .budget_tokens = num_tokens,
                                       .sink_tokens = 3,
                                       .window_tokens = 5};
        const BlockSelector selector = MakeSelector(options, 32, 2, 4);
        const absl::StatusOr<BlockPartition> partition = selector.Partition(num_tokens);
        ASSERT_TRUE(partition.ok());
        std::vector<float> bounds(static_cast<size_t>(4 * partition->num_candidates()));
        for (float& bound : bounds) bound = std::normal_distribution<float>()(rng);
        const absl::StatusOr<BlockSelection> selection = selector.Select(num_tokens, bounds);
        ASSERT_TRUE(selection.ok());
        ASSERT_EQ(selection->num_sets, mode == SelectionMode::kSoloHead ? 1 : 2);
        for (int32_t set = 0; set < selection->num_sets; ++set) {
          EXPECT_THAT(selection->set(set), ElementsAreArray(Range(0, partition->num_blocks)));
        }
      }
    }
  }
}

// --- Scores from query-head bounds. --------------------------------------------------------------

// Softmax over candidates of scale * bounds, per head, summed over `heads`; computed in double.
std::vector<double> SoftmaxSum(const std::vector<float>& bounds, int32_t first_head, int32_t heads,
                               size_t candidates, double scale) {
  std::vector<double> sums(candidates, 0.0);
  if (candidates == 0) return sums;
  for (int32_t h = first_head; h < first_head + heads; ++h) {
    const auto row = bounds.begin() + static_cast<int64_t>(h * candidates);
    const double max = *std::max_element(row, row + static_cast<int64_t>(candidates));
    double total = 0.0;
    for (size_t i = 0; i < candidates; ++i) total += std::exp(scale * (row[i] - max));
    for (size_t i = 0; i < candidates; ++i) sums[i] += std::exp(scale * (row[i] - max)) / total;
  }
  return sums;
}

TEST(BlockSelectorTest, SoftmaxSumDefaultsToTheAttentionScale) {
  // head_dim 4: scale 1/2. Two query heads, one KV head; three candidate blocks.
  const SelectionOptions options{.budget_tokens = 12, .sink_tokens = 0, .window_tokens = 0};
  const BlockSelector selector = MakeSelector(options, 4, 1, 2);
  const std::vector<float> bounds = {2, 0, 0,  // head 0
                                     0, 0, 4};
  const absl::StatusOr<BlockSelection> selection = selector.Select(12, bounds);
  ASSERT_TRUE(selection.ok());
  const std::vector<double> expected = SoftmaxSum(bounds, 0, 2, 3, 0.5);
  ASSERT_EQ(selection->scores.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(selection->scores[i], expected[i], 1e-6) << i;
  EXPECT_NEAR(selection->scores[0], std::exp(1.0) / (std::exp(1.0) + 2) + 1 / (std::exp(2.0) + 2),
              1e-6);
}

// Max lets the head whose logits run larger decide; the softmax sum gives each head one vote's
// worth of attention, so a head's offset does not matter.
TEST(BlockSelectorTest, SoftmaxSumIgnoresEachHeadsOffsetMaxDoesNot) {
  const std::vector<float> bounds = {100, 99, 0, 0,    // head 0: blocks 0 and 1 nearly alike
                                     0,   0,  0, 50};  // head 1: only block 3
  std::vector<float> head1_shifted = bounds;
  for (size_t i = 4; i < 8; ++i) head1_shifted[i] += 1000.0f;
  std::vector<float> head0_shifted = bounds;
  for (size_t i = 0; i < 4; ++i) head0_shifted[i] -= 1000.0f;
  for (const HeadAggregate aggregate : {HeadAggregate::kSoftmaxSum, HeadAggregate::kMax}) {
    const SelectionOptions options{.aggregate = aggregate,
                                   .budget_tokens = 4,
                                   .sink_tokens = 0,
                                   .window_tokens = 0,
                                   .logit_scale = 1.0f};
    const BlockSelector selector = MakeSelector(options, 4, 1, 2);
    const auto pick = [&](const std::vector<float>& b) {
      const absl::StatusOr<BlockSelection> selection = selector.Select(16, b);
      EXPECT_TRUE(selection.ok());
      return selection.ok() ? selection->blocks : std::vector<int32_t>{};
    };
    if (aggregate == HeadAggregate::kSoftmaxSum) {
      EXPECT_THAT(pick(bounds), ElementsAre(3));
      EXPECT_THAT(pick(head1_shifted), ElementsAre(3));
      EXPECT_THAT(pick(head0_shifted), ElementsAre(3));
    } else {
      EXPECT_THAT(pick(bounds), ElementsAre(0));
      EXPECT_THAT(pick(head1_shifted), ElementsAre(3));
      EXPECT_THAT(pick(head0_shifted), ElementsAre(3));
    }
  }
}

TEST(BlockSelectorTest, HeadwiseSetsFollowTheirGroupsQueryHeads) {
  // 4 query heads over 2 KV heads; five candidate blocks, two picks per KV head.
  const SelectionOptions options{.mode = SelectionMode::kHeadWise,
                                 .aggregate = HeadAggregate::kMax,
                                 .budget_tokens = 8,
                                 .sink_tokens = 0,
                                 .window_tokens = 0};
  const BlockSelector selector = MakeSelector(options, 4, 2, 4);
  const std::vector<float> bounds = {9, 0, 0, 0, 0,   // query head 0 (KV head 0)
                                     0, 0, 0, 0, 8,   // query head 1 (KV head 0)
                                     0, 7, 0, 0, 0,   // query head 2 (KV head 1)
                                     0, 0, 6, 0, 0};  // query head 3 (KV head 1)
  const absl::StatusOr<BlockSelection> selection = selector.Select(20, bounds);
  ASSERT_TRUE(selection.ok());
  ASSERT_EQ(selection->num_sets, 2);
  EXPECT_THAT(selection->set(0), ElementsAre(0, 4));
  EXPECT_THAT(selection->set(1), ElementsAre(1, 2));
  EXPECT_THAT(selection->scores, ElementsAre(9, 0, 0, 0, 8, 0, 7, 6, 0, 0));
}

// --- Random selections against the model. -------------------------------------------------------

// The best `picks` candidates of `scores` (higher first, NaN last, lower block among equals),
// by a full sort.
std::vector<int32_t> ModelPicks(const std::span<const float> scores, int32_t picks) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const float score_a = scores[static_cast<size_t>(a)];
    const float score_b = scores[static_cast<size_t>(b)];
    if (std::isnan(score_a) || std::isnan(score_b)) return !std::isnan(score_a);
    return score_a > score_b;
  });
  order.resize(static_cast<size_t>(picks));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(BlockSelectorTest, RandomSelectionsMatchTheModel) {
  std::mt19937 rng(2024);
  for (int32_t trial = 0; trial < 3000; ++trial) {
    const int32_t block_tokens = 1 + static_cast<int32_t>(rng() % 8);
    const int32_t num_kv_heads = 1 + static_cast<int32_t>(rng() % 3);
    const int32_t num_query_heads = num_kv_heads * (1 + static_cast<int32_t>(rng() % 3));
    const int32_t num_tokens = static_cast<int32_t>(rng() % 120);
    const SelectionOptions options{
        .mode = rng() % 2 ? SelectionMode::kSoloHead : SelectionMode::kHeadWise,
        .aggregate = rng() % 2 ? HeadAggregate::kSoftmaxSum : HeadAggregate::kMax,
        .budget_tokens = static_cast<int32_t>(rng() % 130),
        .sink_tokens = static_cast<int32_t>(rng() % 10),
        .window_tokens = static_cast<int32_t>(rng() % 20),
        .logit_scale = 0.25f + static_cast<float>(rng() % 4)};
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    const BlockSelector selector =
        MakeSelector(options, block_tokens, num_kv_heads, num_query_heads);
    const absl::StatusOr<BlockPartition> partition = selector.Partition(num_tokens);
    ASSERT_TRUE(partition.ok());
    const size_t candidates = static_cast<size_t>(partition->num_candidates());
    // Small integers make ties; a few NaNs.
    std::vector<float> bounds(static_cast<size_t>(num_query_heads) * candidates);
    for (float& bound : bounds) {
      const uint32_t draw = rng() % 100;
      bound = draw < 2 ? kNan : static_cast<float>(draw % (trial % 2 ? 5 : 97)) - 2.0f;
    }
    const absl::StatusOr<BlockSelection> selection = selector.Select(num_tokens, bounds);
    ASSERT_TRUE(selection.ok());

    const bool solo = options.mode == SelectionMode::kSoloHead;
    const int32_t num_sets = solo ? 1 : num_kv_heads;
    EXPECT_EQ(selector.num_sets(), num_sets);
    // From the scores the bounds aggregate to (what a backend's AggregateScores gives), the same.
    const absl::StatusOr<BlockSelection> scored =
        selector.SelectScored(num_tokens, selection->scores);
    ASSERT_TRUE(scored.ok());
    EXPECT_EQ(scored->blocks, selection->blocks);
    const int32_t heads_per_set = num_query_heads / num_sets;
    ASSERT_EQ(selection->num_sets, num_sets);
    ASSERT_EQ(selection->scores.size(), static_cast<size_t>(num_sets) * candidates);
    const ModelPartition model = ModelPartitionOf(num_tokens, block_tokens, options);
    for (int32_t set = 0; set < num_sets; ++set) {
      const std::span<const float> scores =
          std::span<const float>(selection->scores).subspan(set * candidates, candidates);
      // Scores.
      std::vector<double> expected(candidates);
      if (options.aggregate == HeadAggregate::kSoftmaxSum) {
        expected = SoftmaxSum(bounds, set * heads_per_set, heads_per_set, candidates,
                              *options.logit_scale);
      } else {
        for (size_t i = 0; i < candidates; ++i) {
          expected[i] = -std::numeric_limits<double>::infinity();
          for (int32_t h = set * heads_per_set; h < (set + 1) * heads_per_set; ++h) {
            const float bound = bounds[static_cast<size_t>(h) * candidates + i];
            expected[i] = std::isnan(bound) || std::isnan(expected[i])
                              ? std::numeric_limits<double>::quiet_NaN()
                              : std::max(expected[i], double{bound});
          }
        }
      }
      for (size_t i = 0; i < candidates; ++i) {
        if (std::isnan(expected[i])) {
          ASSERT_TRUE(std::isnan(scores[i])) << "candidate " << i;
        } else {
          ASSERT_NEAR(scores[i], expected[i], 1e-6 * std::max(1.0, std::abs(expected[i])))
              << "candidate " << i;
        }
      }
      // Blocks: the forced ones and the best picks of these scores, in order.
      std::vector<int32_t> expected_blocks;
      const std::vector<int32_t> picks = ModelPicks(scores, partition->picks);
      for (int32_t block = 0; block < partition->num_blocks; ++block) {
        const bool picked =
            std::binary_search(picks.begin(), picks.end(), block - partition->sink_end);
        if (model.forced[static_cast<size_t>(block)] ||
            (block >= partition->sink_end && block < partition->window_begin && picked)) {
          expected_blocks.push_back(block);
        }
      }
      ASSERT_THAT(selection->set(set), ElementsAreArray(expected_blocks)) << "set " << set;
      int32_t tokens = 0;
      for (const int32_t block : selection->set(set)) {
        tokens += std::min(block_tokens, num_tokens - block * block_tokens);
      }
      ASSERT_EQ(tokens, partition->selected_tokens);
    }
  }
}

TEST(BlockSelectorTest, RejectsBadArguments) {
  const PagedKvLayout layout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 4};
  EXPECT_EQ(BlockSelector::Create(layout, 3, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockSelector::Create(layout, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  PagedKvLayout no_tokens = layout;
  no_tokens.block_tokens = 0;
  EXPECT_EQ(BlockSelector::Create(no_tokens, 2, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const SelectionOptions& options :
       {SelectionOptions{.budget_tokens = -1}, SelectionOptions{.sink_tokens = -1},
        SelectionOptions{.window_tokens = -1}, SelectionOptions{.logit_scale = 0.0f},
        SelectionOptions{.logit_scale = kNan},
        SelectionOptions{.logit_scale = std::numeric_limits<float>::infinity()}}) {
    EXPECT_EQ(BlockSelector::Create(layout, 2, options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<BlockSelector> selector =
      BlockSelector::Create(layout, 4, {.budget_tokens = 8, .sink_tokens = 0, .window_tokens = 0});
  ASSERT_TRUE(selector.ok());
  EXPECT_EQ(selector->Partition(-1).status().code(), absl::StatusCode::kInvalidArgument);
  // 16 tokens: 4 candidates x 4 query heads.
  EXPECT_TRUE(selector->Select(16, std::vector<float>(16)).ok());
  EXPECT_EQ(selector->Select(16, std::vector<float>(15)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(selector->Select(16, std::vector<float>(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // One score a candidate (solohead: one set).
  EXPECT_TRUE(selector->SelectScored(16, std::vector<float>(4)).ok());
  EXPECT_EQ(selector->SelectScored(16, std::vector<float>(16)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pulse
