#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/backend/reference/block_summary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse::reference {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// One box a block at `radius`.
BlockEstimator Box(float radius) { return {.radius = radius}; }

// Key d of token t of KV head h in a block of `layout`, as PagedKvLayout lays it out.
float& Key(const PagedKvLayout& layout, std::vector<float>& block, int32_t h, int32_t t,
           int32_t d) {
  return block[static_cast<size_t>(h * layout.head_elems() + int64_t{t} * layout.head_dim + d)];
}

std::vector<float> RandomFloats(std::mt19937& rng, size_t count, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (float& value : values) value = normal(rng);
  return values;
}

// The summary computed straight from its definition.
std::vector<float> ReferenceSummary(const PagedKvLayout& layout, std::vector<float>& block,
                                    int32_t tokens) {
  std::vector<float> summary;
  for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
    for (const bool is_max : {false, true}) {
      for (int32_t d = 0; d < layout.head_dim; ++d) {
        float extreme = Key(layout, block, h, 0, d);
        for (int32_t t = 1; t < tokens; ++t) {
          const float key = Key(layout, block, h, t, d);
          extreme = is_max ? std::max(extreme, key) : std::min(extreme, key);
        }
        summary.push_back(extreme);
      }
    }
  }
  return summary;
}

// A block of 3 tokens, 2 KV heads of 2 dims: head 0's keys (1, -1), (3, -5), (2, 4); head 1's
// (0, 0), (-2, 7), (6, 7); its values 1000.
constexpr PagedKvLayout kSmallLayout{.block_tokens = 3, .num_kv_heads = 2, .head_dim = 2};

std::vector<float> SmallBlock() {
  std::vector<float> block(static_cast<size_t>(kSmallLayout.block_elems()), 1000.0f);
  const float keys[2][3][2] = {{{1, -1}, {3, -5}, {2, 4}}, {{0, 0}, {-2, 7}, {6, 7}}};
  for (int32_t h = 0; h < 2; ++h) {
    for (int32_t t = 0; t < 3; ++t) {
      for (int32_t d = 0; d < 2; ++d) Key(kSmallLayout, block, h, t, d) = keys[h][t][d];
    }
  }
  return block;
}

TEST(BlockSummaryTest, MinRowThenMaxRowPerHead) {
  const PagedKvLayout layout = kSmallLayout;
  EXPECT_EQ(SummaryElems(layout, {}), 8);
  const std::vector<float> block = SmallBlock();
  std::vector<float> summary(8);
  ASSERT_TRUE(SummarizeBlock(layout, Box(1.0f), block, 3, summary).ok());
  EXPECT_THAT(summary, ElementsAre(1, -5, 3, 4, -2, 0, 6, 7));
  ASSERT_TRUE(SummarizeBlock(layout, Box(1.0f), block, 2, summary).ok());
  EXPECT_THAT(summary, ElementsAre(1, -5, 3, -1, -2, 0, 0, 7));
}

TEST(BlockSummaryTest, ARadiusShrinksEachChannelAroundItsMidpoint) {
  const PagedKvLayout layout = kSmallLayout;
  const std::vector<float> block = SmallBlock();
  // Ranges [1, 3], [-5, 4]; [-2, 6], [0, 7]: midpoints 2, -0.5, 2, 3.5; half-widths 1, 4.5, 4, 3.5.
  std::vector<float> summary(8);
  ASSERT_TRUE(SummarizeBlock(layout, Box(0.0f), block, 3, summary).ok());
  EXPECT_THAT(summary, ElementsAre(2, -0.5, 2, -0.5, 2, 3.5, 2, 3.5));
  ASSERT_TRUE(SummarizeBlock(layout, Box(0.5f), block, 3, summary).ok());
  EXPECT_THAT(summary, ElementsAre(1.5, -2.75, 2.5, 1.75, 0, 1.75, 4, 5.25));
  // Head 0 scores q = (1, 2) by max(q.min, q.max) a channel: 2.5 + 3.5, which is q.midpoint (1)
  // plus half of sum |q| * half-width (0.5 * 10).
  EXPECT_EQ(BlockBound(std::vector<float>{1, 2}, std::span(summary).first(4)), 6.0f);
  // At radius 0 that is q.midpoint alone.
  ASSERT_TRUE(SummarizeBlock(layout, Box(0.0f), block, 3, summary).ok());
  EXPECT_EQ(BlockBound(std::vector<float>{1, 2}, std::span(summary).first(4)), 1.0f);
  for (const float radius : {-0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_EQ(SummarizeBlock(layout, Box(radius), block, 3, summary).code(),
              absl::StatusCode::kInvalidArgument)
        << radius;
  }
}

TEST(BlockSummaryTest, ReadsOnlyTheKeysOfItsTokens) {
  const PagedKvLayout layout{.block_tokens = 8, .num_kv_heads = 3, .head_dim = 5};
  std::mt19937 rng(7);
  std::vector<float> block = RandomFloats(rng, static_cast<size_t>(layout.block_elems()), 1.0f);
  const int32_t tokens = 5;
  // Garbage in the tokens after `tokens` and in the values.
  for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
    for (int32_t t = tokens; t < layout.block_tokens; ++t) {
      for (int32_t d = 0; d < layout.head_dim; ++d) {
        Key(layout, block, h, t, d) = (t % 2 == 0) ? kNan : 1e30f * (d % 2 == 0 ? 1 : -1);
      }
    }
  }
  std::fill(block.begin() + layout.value_offset(), block.end(), kNan);
  std::vector<float> summary(static_cast<size_t>(SummaryElems(layout, {})));
  ASSERT_TRUE(SummarizeBlock(layout, Box(1.0f), block, tokens, summary).ok());
  EXPECT_EQ(summary, ReferenceSummary(layout, block, tokens));
}

TEST(BlockSummaryTest, SkipsNanKeysAsFminfDoes) {
  const PagedKvLayout layout{.block_tokens = 3, .num_kv_heads = 1, .head_dim = 2};
  std::vector<float> block = {kNan, 1, 2, kNan, -3, kNan,  // keys (NaN, 1), (2, NaN), (-3, NaN)
                              0,    0, 0, 0,    0,  0};
  std::vector<float> summary(4);
  ASSERT_TRUE(SummarizeBlock(layout, Box(1.0f), block, 3, summary).ok());
  EXPECT_THAT(summary, ElementsAre(-3, 1, 2, 1));
}

TEST(BlockSummaryTest, RandomBlocksMatchTheDefinition) {
  std::mt19937 rng(11);
  for (int32_t trial = 0; trial < 200; ++trial) {
    const PagedKvLayout layout{.block_tokens = 1 + static_cast<int32_t>(rng() % 40),
                               .num_kv_heads = 1 + static_cast<int32_t>(rng() % 4),
                               .head_dim = 1 + static_cast<int32_t>(rng() % 70)};
    std::vector<float> block =
        RandomFloats(rng, static_cast<size_t>(layout.block_elems()), 1.0f + trial % 5);
    const int32_t tokens = 1 + static_cast<int32_t>(rng() % layout.block_tokens);
    std::vector<float> summary(static_cast<size_t>(SummaryElems(layout, {})), kNan);
    ASSERT_TRUE(SummarizeBlock(layout, Box(1.0f), block, tokens, summary).ok());
    ASSERT_EQ(summary, ReferenceSummary(layout, block, tokens)) << "trial " << trial;
  }
}

TEST(BlockBoundTest, TakesTheLargerProductPerChannel) {
  const std::vector<float> query = {1, -2, 0, 0.5f};
  const std::vector<float> summary = {-1, -3, 5, -4,   // min
                                      2,  1,  7, -2};  // max
  // max(-1, 2) + max(6, -2) + max(0, 0) + max(-2, -1)
  EXPECT_EQ(BlockBound(query, summary), 2 + 6 + 0 - 1);
}

// The property selection relies on: no key of the block has a larger dot product with the query
// than the bound, for every head, every token count and queries of any sign.
TEST(BlockBoundTest, BoundsEveryKeyOfTheBlock) {
  std::mt19937 rng(3);
  for (int32_t trial = 0; trial < 300; ++trial) {
    const PagedKvLayout layout{.block_tokens = 1 + static_cast<int32_t>(rng() % 33),
                               .num_kv_heads = 1 + static_cast<int32_t>(rng() % 3),
                               .head_dim = 1 + static_cast<int32_t>(rng() % 130)};
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
    std::vector<float> block = RandomFloats(rng, static_cast<size_t>(layout.block_elems()), scale);
    if (trial % 3 == 0) {  // keys with an offset per channel, as real keys have
      for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
        for (int32_t t = 0; t < layout.block_tokens; ++t) {
          for (int32_t d = 0; d < layout.head_dim; ++d) Key(layout, block, h, t, d) += d % 7 - 3;
        }
      }
    }
    const int32_t tokens = 1 + static_cast<int32_t>(rng() % layout.block_tokens);
    std::vector<float> summary(static_cast<size_t>(SummaryElems(layout, {})));
    ASSERT_TRUE(SummarizeBlock(layout, Box(1.0f), block, tokens, summary).ok());
    const size_t head_dim = static_cast<size_t>(layout.head_dim);
    const std::vector<float> query = RandomFloats(rng, head_dim, 1.0f);
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      const float bound = BlockBound(
          query, std::span<const float>(summary).subspan(2 * h * head_dim, 2 * head_dim));
      double best = -std::numeric_limits<double>::infinity();
      double magnitude = 0.0;  // of the terms, for the rounding allowance of an fp32 sum
      for (int32_t t = 0; t < tokens; ++t) {
        double dot = 0.0;
        for (size_t d = 0; d < head_dim; ++d) {
          const float key = Key(layout, block, h, t, static_cast<int32_t>(d));
          dot += double{query[d]} * key;
          magnitude = std::max(magnitude, std::abs(double{query[d]} * key));
        }
        best = std::max(best, dot);
      }
      const double allowance = 1e-6 * magnitude * static_cast<double>(head_dim);
      ASSERT_GE(bound, best - allowance) << "trial " << trial << " head " << h;
      if (tokens == 1) {
        ASSERT_NEAR(bound, best, allowance) << "one key: the bound is its dot";
      }
    }
  }
}

TEST(ScoreBlocksTest, EveryQueryHeadAgainstItsKvHeadsSummaries) {
  const PagedKvLayout layout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 3};
  constexpr int32_t kQueryHeads = 6;  // groups of 3
  constexpr int32_t kSummaries = 5;
  std::mt19937 rng(5);
  const std::vector<float> summaries =
      RandomFloats(rng, kSummaries * static_cast<size_t>(SummaryElems(layout, {})), 1.0f);
  const std::vector<float> query = RandomFloats(rng, kQueryHeads * 3, 1.0f);
  const std::vector<int32_t> block_ids = {3, 0, 3, 4};
  std::vector<float> bounds(kQueryHeads * block_ids.size(), kNan);
  ASSERT_TRUE(ScoreBlocks(layout, {}, query, summaries, block_ids, bounds).ok());
  for (int32_t h = 0; h < kQueryHeads; ++h) {
    for (size_t i = 0; i < block_ids.size(); ++i) {
      const size_t kv_head = static_cast<size_t>(h / 3);
      const size_t at = static_cast<size_t>(block_ids[i]) * 12 + kv_head * 6;
      EXPECT_EQ(bounds[static_cast<size_t>(h) * block_ids.size() + i],
                BlockBound(std::span<const float>(query).subspan(h * 3u, 3),
                           std::span<const float>(summaries).subspan(at, 6)))
          << "query head " << h << " block " << block_ids[i];
    }
  }
}

TEST(BlockSummaryTest, RejectsShapesThatDoNotFit) {
  const PagedKvLayout layout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 3};
  std::vector<float> block(static_cast<size_t>(layout.block_elems()));
  std::vector<float> summary(12);
  EXPECT_TRUE(SummarizeBlock(layout, Box(1.0f), block, 4, summary).ok());
  for (const int32_t tokens : {0, 5, -1}) {
    const absl::Status status = SummarizeBlock(layout, Box(1.0f), block, tokens, summary);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << tokens;
  }
  std::vector<float> short_block(block.size() - 1);
  EXPECT_THAT(SummarizeBlock(layout, Box(1.0f), short_block, 4, summary).message(),
              HasSubstr("block"));
  std::vector<float> long_summary(13);
  EXPECT_EQ(SummarizeBlock(layout, Box(1.0f), block, 4, long_summary).code(),
            absl::StatusCode::kInvalidArgument);
  PagedKvLayout bf16 = layout;
  bf16.type = DType::kBF16;
  EXPECT_EQ(SummarizeBlock(bf16, Box(1.0f), block, 4, summary).code(),
            absl::StatusCode::kInvalidArgument);

  const std::vector<float> summaries(24);
  std::vector<float> bounds(4);
  const std::vector<float> query(6);  // two query heads
  const std::vector<int32_t> ids = {0, 1};
  EXPECT_TRUE(ScoreBlocks(layout, {}, query, summaries, ids, bounds).ok());
  const std::vector<float> three_heads(9);  // not a multiple of two KV heads
  EXPECT_EQ(ScoreBlocks(layout, {}, three_heads, summaries, ids, bounds).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> ragged(7);
  EXPECT_EQ(ScoreBlocks(layout, {}, ragged, summaries, ids, bounds).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> missing = {0, 2};
  bounds.assign(4, kNan);
  EXPECT_THAT(ScoreBlocks(layout, {}, query, summaries, missing, bounds).message(),
              HasSubstr("block 2 has no summary"));
  EXPECT_TRUE(std::isnan(bounds[0])) << "a failed call writes nothing";
  std::vector<float> few_bounds(3);
  EXPECT_EQ(ScoreBlocks(layout, {}, query, summaries, ids, few_bounds).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> torn_summaries(23);
  EXPECT_EQ(ScoreBlocks(layout, {}, query, torn_summaries, ids, bounds).code(),
            absl::StatusCode::kInvalidArgument);
}

// Boxes of consecutive tokens: a block of 4 tokens in 2 boxes of 2, one KV head of 2 dims, keys
// (1, 0), (3, -2) | (-1, 5), (0, 1). Its estimate for a query is the larger of the boxes'.
TEST(BlockEstimatorTest, BoxesSummarizeTheirTokensAndTheBlockTakesTheBest) {
  const PagedKvLayout layout{.block_tokens = 4, .num_kv_heads = 1, .head_dim = 2};
  std::vector<float> block(static_cast<size_t>(layout.block_elems()), 1000.0f);
  const float keys[4][2] = {{1, 0}, {3, -2}, {-1, 5}, {0, 1}};
  for (int32_t t = 0; t < 4; ++t) {
    for (int32_t d = 0; d < 2; ++d) Key(layout, block, 0, t, d) = keys[t][d];
  }
  const BlockEstimator two{.boxes = 2, .radius = 1.0f};
  EXPECT_EQ(SummaryElems(layout, two), 8);
  std::vector<float> summary(8);
  ASSERT_TRUE(SummarizeBlock(layout, two, block, 4, summary).ok());
  EXPECT_THAT(summary, ElementsAre(1, -2, 3, 0, -1, 1, 0, 5));
  // q = (1, 1): box 0 bounds 3 + 0, box 1 0 + 5.
  EXPECT_EQ(BlockBound(std::vector<float>{1, 1}, summary), 5.0f);
  // Three of the tokens: the second box holds token 2 alone.
  ASSERT_TRUE(SummarizeBlock(layout, two, block, 3, summary).ok());
  EXPECT_THAT(summary, ElementsAre(1, -2, 3, 0, -1, 5, -1, 5));
  // One token: the second box repeats the first.
  ASSERT_TRUE(SummarizeBlock(layout, two, block, 1, summary).ok());
  EXPECT_THAT(summary, ElementsAre(1, 0, 1, 0, 1, 0, 1, 0));
  EXPECT_EQ(SummarizeBlock(layout, {.boxes = 3}, block, 4, summary).code(),
            absl::StatusCode::kInvalidArgument);
}

// As many boxes as tokens at radius 0: every key kept, and the estimate is the best key's dot
// product exactly (the same sum, in the same order, as the bound of a one-token box).
TEST(BlockEstimatorTest, TokenBoxesScoreEveryKeyExactly) {
  std::mt19937 rng(17);
  for (int32_t trial = 0; trial < 50; ++trial) {
    const PagedKvLayout layout{.block_tokens = 1 + static_cast<int32_t>(rng() % 16),
                               .num_kv_heads = 1 + static_cast<int32_t>(rng() % 3),
                               .head_dim = 1 + static_cast<int32_t>(rng() % 40)};
    const BlockEstimator tokens{.boxes = layout.block_tokens, .radius = 0.0f};
    std::vector<float> block = RandomFloats(rng, static_cast<size_t>(layout.block_elems()), 1.0f);
    std::vector<float> summary(static_cast<size_t>(SummaryElems(layout, tokens)));
    ASSERT_TRUE(SummarizeBlock(layout, tokens, block, layout.block_tokens, summary).ok());
    const auto head_dim = static_cast<size_t>(layout.head_dim);
    const std::vector<float> query = RandomFloats(rng, head_dim, 1.0f);
    const size_t head_elems = summary.size() / static_cast<size_t>(layout.num_kv_heads);
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      float best = -std::numeric_limits<float>::infinity();
      for (int32_t t = 0; t < layout.block_tokens; ++t) {
        float dot = 0.0f;
        for (size_t d = 0; d < head_dim; ++d) {
          // Both rows of a one-key box are the key: the larger product is the product, rounded
          // before it is added (volatile: the library is built without contraction, this test
          // may not be).
          const volatile float product =
              query[d] * Key(layout, block, h, t, static_cast<int32_t>(d));
          dot += product;
        }
        best = std::max(best, dot);
      }
      ASSERT_EQ(
          BlockBound(query, std::span<const float>(summary).subspan(h * head_elems, head_elems)),
          best)
          << "trial " << trial;
    }
  }
}

TEST(BlockEstimatorTest, PrecisionRoundsTheRowsAsTheirStoreWould) {
  const PagedKvLayout layout{.block_tokens = 1, .num_kv_heads = 1, .head_dim = 4};
  std::vector<float> block = {1.0f + 1.0f / 256, -0.3f, 0.126f, 12.7f, 0, 0, 0, 0};
  std::vector<float> summary(8);
  ASSERT_TRUE(
      SummarizeBlock(layout, {.precision = SummaryPrecision::kBf16}, block, 1, summary).ok());
  // 1 + 2^-8 is a tie between bf16's 1 and 1 + 2^-7: to even, 1.
  EXPECT_EQ(summary[0], 1.0f);
  EXPECT_EQ(summary[3], 12.6875f);
  ASSERT_TRUE(
      SummarizeBlock(layout, {.precision = SummaryPrecision::kInt8}, block, 1, summary).ok());
  // Steps of 12.7 / 127 = 0.1: -0.3 and 0.126 become -0.3 and 0.1 (in the step's float).
  const float step = 12.7f / 127.0f;
  EXPECT_EQ(summary[1], -3.0f * step);
  EXPECT_EQ(summary[2], 1.0f * step);
  EXPECT_EQ(summary[3], 127.0f * step);
  // A row of zeros stays.
  std::vector<float> zeros(8, 0.0f);
  ASSERT_TRUE(
      SummarizeBlock(layout, {.precision = SummaryPrecision::kInt8}, zeros, 1, summary).ok());
  EXPECT_THAT(summary, ElementsAre(0, 0, 0, 0, 0, 0, 0, 0));
}

TEST(BlockEstimatorTest, NamesAndBytes) {
  const PagedKvLayout layout{.block_tokens = 32, .num_kv_heads = 2, .head_dim = 64};
  for (const char* name : {"box-r0", "box-r1", "boxes4-r0.5", "tokens-r0-int8", "boxes8-r0-bf16"}) {
    const absl::StatusOr<BlockEstimator> estimator = ParseEstimator(name, 32);
    ASSERT_TRUE(estimator.ok()) << name << ": " << estimator.status();
    EXPECT_EQ(EstimatorName(*estimator, 32), name);
  }
  for (const char* bad : {"", "box", "box-0", "boxes-r0", "boxesx-r0", "box-r0-fp8", "box-rx"}) {
    EXPECT_EQ(ParseEstimator(bad, 32).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // Quest's box in fp32: 2 heads x 2 rows x 64 floats; the center alone at radius 0.
  EXPECT_EQ(SummaryStoredBytes(layout, {.radius = 1.0f}), 2 * 2 * 64 * 4);
  EXPECT_EQ(SummaryStoredBytes(layout, {}), 2 * 64 * 4);
  // Every key in int8 with a scale each: 2 heads x 32 tokens x (64 + 4) bytes.
  EXPECT_EQ(SummaryStoredBytes(layout, {.boxes = 32, .precision = SummaryPrecision::kInt8}),
            2 * 32 * 68);
  // 6 query heads against 4 boxes of 64 channels: one product each at radius 0, two above.
  EXPECT_EQ(ScoreMultiplyAdds(layout, {.boxes = 4}, 6), 6 * 4 * 64);
  EXPECT_EQ(ScoreMultiplyAdds(layout, {.boxes = 4, .radius = 0.5f}, 6), 6 * 4 * 2 * 64);
  EXPECT_FALSE(ValidateEstimator({.boxes = 0}, layout).ok());
  EXPECT_FALSE(ValidateEstimator({.boxes = 5}, layout).ok());
  EXPECT_FALSE(ValidateEstimator({.radius = 2.0f}, layout).ok());
}

// Two segments of a step's bounds (3 heads x 5 candidates): the first takes candidates 0-2 of
// every head as one set, by max; the second candidates 3-4 as three one-head sets, by softmax.
TEST(AggregateScoresTest, EachSegmentItsHeadsAndCandidates) {
  const std::vector<float> bounds = {1, 5, 2,    0, 2,  //
                                     4, 1, kNan, 1, 1,  //
                                     0, 3, 3,    3, 0};
  const std::vector<ScoreSegment> segments = {
      {.first = 0, .count = 3, .num_sets = 1, .aggregate = HeadAggregate::kMax},
      {.first = 3,
       .count = 2,
       .num_sets = 3,
       .aggregate = HeadAggregate::kSoftmaxSum,
       .logit_scale = 0.5f,
       .scores_first = 4}};
  std::vector<float> scores(10, -1.0f);
  ASSERT_TRUE(AggregateScores(bounds, 3, segments, scores).ok());
  EXPECT_EQ(scores[0], 4.0f);
  EXPECT_EQ(scores[1], 5.0f);
  EXPECT_TRUE(std::isnan(scores[2]));  // a NaN bound stays the score
  EXPECT_EQ(scores[3], -1.0f);         // no segment writes it
  // Head 0: softmax of 0.5 * {0, 2}; head 1: of {0.5, 0.5}; head 2: of {1.5, 0}.
  const double e = std::exp(1.0);
  EXPECT_FLOAT_EQ(scores[4], static_cast<float>(1 / (1 + e)));
  EXPECT_FLOAT_EQ(scores[5], static_cast<float>(e / (1 + e)));
  EXPECT_FLOAT_EQ(scores[6], 0.5f);
  EXPECT_FLOAT_EQ(scores[7], 0.5f);
  EXPECT_FLOAT_EQ(scores[8], static_cast<float>(std::exp(1.5) / (1 + std::exp(1.5))));
  EXPECT_FLOAT_EQ(scores[9], static_cast<float>(1 / (1 + std::exp(1.5))));
}

TEST(AggregateScoresTest, RejectsSegmentsOutsideTheBoundsOrScores) {
  const std::vector<float> bounds(4 * 6, 0.0f);
  std::vector<float> scores(12);
  for (const ScoreSegment& segment :
       {ScoreSegment{.first = 4, .count = 3}, ScoreSegment{.first = -1, .count = 2},
        ScoreSegment{.count = 2, .num_sets = 3}, ScoreSegment{.count = 2, .num_sets = 0},
        ScoreSegment{.count = 4, .num_sets = 4}, ScoreSegment{.count = 2, .scores_first = 11}}) {
    EXPECT_EQ(AggregateScores(bounds, 4, std::span(&segment, 1), scores).code(),
              absl::StatusCode::kInvalidArgument)
        << segment.first << " " << segment.count << " " << segment.num_sets;
  }
  EXPECT_EQ(AggregateScores(bounds, 5, {}, scores).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pulse::reference
