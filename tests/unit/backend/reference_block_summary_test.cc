#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/backend/bf16.h"
#include "core/backend/reference/block_summary.h"
#include "core/backend/summary_int.h"
#include "core/backend/summary_radius.h"
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

// What SummarizeBlock stores for the first `tokens` tokens of `block`.
std::vector<std::byte> Summarize(const PagedKvLayout& layout, const BlockEstimator& estimator,
                                 std::span<const float> block, int32_t tokens) {
  std::vector<std::byte> summary(static_cast<size_t>(SummaryBytes(layout, estimator)));
  const absl::Status status = SummarizeBlock(layout, estimator, block, tokens, summary);
  EXPECT_TRUE(status.ok()) << status;
  return summary;
}

// The bytes of a summary (or part of one) read as Ts.
template <typename T>
std::vector<T> As(std::span<const std::byte> bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

// fp32 rows as a summary stores them.
std::vector<std::byte> Bytes(const std::vector<float>& rows) {
  const std::span<const std::byte> bytes = std::as_bytes(std::span(rows));
  return {bytes.begin(), bytes.end()};
}

// Equal values, or both NaN.
bool SameValue(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// The summary computed straight from its definition: per head its min row, then its max row.
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

// KV head h's estimate from the keys in fp32, both rows of every box kept whatever the radius:
// each box's channels' min and max (NaN keys skipped), shrunk by ShrinkToRadius, and the sum in
// channel order of max(q * min, q * max), the best box kept. At radius 0 min and max are equal,
// so the stored center alone must give the same value, bit for bit.
float TwoRowBound(const PagedKvLayout& layout, const BlockEstimator& estimator,
                  std::vector<float>& block, int32_t tokens, int32_t h,
                  std::span<const float> query) {
  const int32_t box_tokens = layout.block_tokens / estimator.boxes;
  float best = kNan;
  for (int32_t box = 0; box < estimator.boxes; ++box) {
    const int32_t first = std::min(box, (tokens - 1) / box_tokens) * box_tokens;
    const int32_t end = std::min(first + box_tokens, tokens);
    float bound = 0.0f;
    for (int32_t d = 0; d < layout.head_dim; ++d) {
      float lo = Key(layout, block, h, first, d);
      float hi = lo;
      for (int32_t t = first + 1; t < end; ++t) {
        lo = std::fmin(lo, Key(layout, block, h, t, d));
        hi = std::fmax(hi, Key(layout, block, h, t, d));
      }
      if (estimator.radius != 1.0f) ShrinkToRadius(lo, hi, estimator.radius);
      bound += std::max(query[d] * lo, query[d] * hi);
    }
    best = std::fmax(best, bound);
  }
  return best;
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
  EXPECT_EQ(SummaryBytes(layout, Box(1.0f)), 8 * 4);
  const std::vector<float> block = SmallBlock();
  EXPECT_THAT(As<float>(Summarize(layout, Box(1.0f), block, 3)),
              ElementsAre(1, -5, 3, 4, -2, 0, 6, 7));
  EXPECT_THAT(As<float>(Summarize(layout, Box(1.0f), block, 2)),
              ElementsAre(1, -5, 3, -1, -2, 0, 0, 7));
}

TEST(BlockSummaryTest, ARadiusShrinksEachChannelAroundItsMidpoint) {
  const PagedKvLayout layout = kSmallLayout;
  const std::vector<float> block = SmallBlock();
  // Ranges [1, 3], [-5, 4]; [-2, 6], [0, 7]: midpoints 2, -0.5, 2, 3.5; half-widths 1, 4.5, 4, 3.5.
  // At radius 0 a box keeps one row, its center.
  EXPECT_EQ(SummaryBytes(layout, Box(0.0f)), 4 * 4);
  EXPECT_THAT(As<float>(Summarize(layout, Box(0.0f), block, 3)), ElementsAre(2, -0.5, 2, 3.5));
  const std::vector<std::byte> summary = Summarize(layout, Box(0.5f), block, 3);
  EXPECT_THAT(As<float>(summary), ElementsAre(1.5, -2.75, 2.5, 1.75, 0, 1.75, 4, 5.25));
  // Head 0 scores q = (1, 2) by max(q.min, q.max) a channel: 2.5 + 3.5, which is q.midpoint (1)
  // plus half of sum |q| * half-width (0.5 * 10).
  const std::vector<float> query = {1, 2};
  EXPECT_EQ(BlockBound(layout, Box(0.5f), query, summary, 0), 6.0f);
  // At radius 0 that is q.midpoint alone.
  EXPECT_EQ(BlockBound(layout, Box(0.0f), query, Summarize(layout, Box(0.0f), block, 3), 0), 1.0f);
  std::vector<std::byte> bytes(static_cast<size_t>(SummaryBytes(layout, Box(1.0f))));
  for (const float radius : {-0.5f, 1.5f, kNan}) {
    EXPECT_EQ(SummarizeBlock(layout, Box(radius), block, 3, bytes).code(),
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
  EXPECT_EQ(As<float>(Summarize(layout, Box(1.0f), block, tokens)),
            ReferenceSummary(layout, block, tokens));
}

TEST(BlockSummaryTest, SkipsNanKeysAsFminfDoes) {
  const PagedKvLayout layout{.block_tokens = 3, .num_kv_heads = 1, .head_dim = 2};
  std::vector<float> block = {kNan, 1, 2, kNan, -3, kNan,  // keys (NaN, 1), (2, NaN), (-3, NaN)
                              0,    0, 0, 0,    0,  0};
  EXPECT_THAT(As<float>(Summarize(layout, Box(1.0f), block, 3)), ElementsAre(-3, 1, 2, 1));
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
    ASSERT_EQ(As<float>(Summarize(layout, Box(1.0f), block, tokens)),
              ReferenceSummary(layout, block, tokens))
        << "trial " << trial;
  }
}

TEST(BlockBoundTest, TakesTheLargerProductPerChannel) {
  const PagedKvLayout layout{.block_tokens = 2, .num_kv_heads = 1, .head_dim = 4};
  const std::vector<float> query = {1, -2, 0, 0.5f};
  const std::vector<std::byte> summary = Bytes({-1, -3, 5, -4,  // min
                                                2, 1, 7, -2});  // max
  // max(-1, 2) + max(6, -2) + max(0, 0) + max(-2, -1)
  EXPECT_EQ(BlockBound(layout, Box(1.0f), query, summary, 0), 2 + 6 + 0 - 1);
  // At radius 0 the one row is the center: 1 * -1 + -2 * -3 + 0 * 5 + 0.5 * -4.
  EXPECT_EQ(BlockBound(layout, Box(0.0f), query, std::span(summary).first(16), 0), -1 + 6 + 0 - 2);
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
    const std::vector<std::byte> summary = Summarize(layout, Box(1.0f), block, tokens);
    const size_t head_dim = static_cast<size_t>(layout.head_dim);
    const std::vector<float> query = RandomFloats(rng, head_dim, 1.0f);
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      const float bound = BlockBound(layout, Box(1.0f), query, summary, h);
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

// GroupBounds writes each query head's BlockBound, bit for bit, at its stride, for every
// precision, radius and box count (chunks of eight boxes and the ones after them).
TEST(BlockBoundTest, GroupBoundsAreEachHeadsBlockBound) {
  std::mt19937 rng(29);
  for (int32_t trial = 0; trial < 40; ++trial) {
    const PagedKvLayout layout{.block_tokens = 4 * (1 + static_cast<int32_t>(rng() % 8)),
                               .num_kv_heads = 1 + static_cast<int32_t>(rng() % 3),
                               .head_dim = 2 * (1 + static_cast<int32_t>(rng() % 40))};
    std::vector<float> block = RandomFloats(rng, static_cast<size_t>(layout.block_elems()), 2.0f);
    const int32_t group = 1 + static_cast<int32_t>(rng() % 4);
    const auto head_dim = static_cast<size_t>(layout.head_dim);
    const std::vector<float> queries = RandomFloats(rng, group * head_dim, 1.0f);
    for (const SummaryPrecision precision : {SummaryPrecision::kF32, SummaryPrecision::kBf16,
                                             SummaryPrecision::kInt8, SummaryPrecision::kInt4}) {
      for (const float radius : {0.0f, 1.0f}) {
        for (const int32_t boxes : {1, 2, layout.block_tokens}) {
          const BlockEstimator estimator{.boxes = boxes, .radius = radius, .precision = precision};
          const std::vector<std::byte> summary =
              Summarize(layout, estimator, block, layout.block_tokens);
          for (int32_t kv_head = 0; kv_head < layout.num_kv_heads; ++kv_head) {
            std::vector<float> bounds(static_cast<size_t>(group) * 5, -1.0f);
            GroupBounds(layout, estimator, queries.data(), group, summary, kv_head, bounds.data(),
                        5);
            for (int32_t h = 0; h < group; ++h) {
              const float expected =
                  BlockBound(layout, estimator,
                             std::span<const float>(queries).subspan(h * head_dim, head_dim),
                             summary, kv_head);
              ASSERT_TRUE(SameValue(bounds[static_cast<size_t>(h) * 5], expected))
                  << "trial " << trial << " " << EstimatorName(estimator, layout.block_tokens);
              ASSERT_EQ(bounds[static_cast<size_t>(h) * 5 + 1], -1.0f);
            }
          }
        }
      }
    }
  }
}

TEST(ScoreBlocksTest, EveryQueryHeadAgainstItsKvHeadsSummaries) {
  const PagedKvLayout layout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 3};
  constexpr int32_t kQueryHeads = 6;  // groups of 3
  constexpr int32_t kSummaries = 5;
  std::mt19937 rng(5);
  for (const BlockEstimator& estimator :
       {BlockEstimator{}, Box(1.0f),
        BlockEstimator{.boxes = 2, .radius = 0.5f, .precision = SummaryPrecision::kInt8}}) {
    SCOPED_TRACE(EstimatorName(estimator, layout.block_tokens));
    const auto bytes = static_cast<size_t>(SummaryBytes(layout, estimator));
    std::vector<std::byte> summaries;
    for (int32_t s = 0; s < kSummaries; ++s) {
      const std::vector<float> block =
          RandomFloats(rng, static_cast<size_t>(layout.block_elems()), 1.0f);
      const std::vector<std::byte> summary = Summarize(layout, estimator, block, 4);
      summaries.insert(summaries.end(), summary.begin(), summary.end());
    }
    const std::vector<float> query = RandomFloats(rng, kQueryHeads * 3, 1.0f);
    const std::vector<int32_t> block_ids = {3, 0, 3, 4};
    std::vector<float> bounds(kQueryHeads * block_ids.size(), kNan);
    ASSERT_TRUE(ScoreBlocks(layout, estimator, query, summaries, block_ids, bounds).ok());
    for (int32_t h = 0; h < kQueryHeads; ++h) {
      for (size_t i = 0; i < block_ids.size(); ++i) {
        EXPECT_EQ(bounds[static_cast<size_t>(h) * block_ids.size() + i],
                  BlockBound(layout, estimator, std::span<const float>(query).subspan(h * 3u, 3),
                             std::span(summaries).subspan(block_ids[i] * bytes, bytes), h / 3))
            << "query head " << h << " block " << block_ids[i];
      }
    }
  }
}

TEST(BlockSummaryTest, RejectsShapesThatDoNotFit) {
  const PagedKvLayout layout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 3};
  std::vector<float> block(static_cast<size_t>(layout.block_elems()));
  std::vector<std::byte> summary(2 * 2 * 3 * 4);
  EXPECT_TRUE(SummarizeBlock(layout, Box(1.0f), block, 4, summary).ok());
  for (const int32_t tokens : {0, 5, -1}) {
    const absl::Status status = SummarizeBlock(layout, Box(1.0f), block, tokens, summary);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << tokens;
  }
  std::vector<float> short_block(block.size() - 1);
  EXPECT_THAT(SummarizeBlock(layout, Box(1.0f), short_block, 4, summary).message(),
              HasSubstr("block"));
  std::vector<std::byte> long_summary(summary.size() + 1);
  EXPECT_THAT(SummarizeBlock(layout, Box(1.0f), block, 4, long_summary).message(),
              HasSubstr("the summary has 49 bytes; the layout needs 48"));
  // At radius 0 the summary is half as large.
  EXPECT_EQ(SummarizeBlock(layout, Box(0.0f), block, 4, summary).code(),
            absl::StatusCode::kInvalidArgument);
  PagedKvLayout bf16 = layout;
  bf16.type = DType::kBF16;
  EXPECT_EQ(SummarizeBlock(bf16, Box(1.0f), block, 4, summary).code(),
            absl::StatusCode::kInvalidArgument);

  const std::vector<std::byte> summaries(2 * 24);  // two summaries of 2 heads x 1 row x 3 floats
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
  const std::vector<std::byte> torn_summaries(47);
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
  EXPECT_EQ(SummaryBytes(layout, two), 8 * 4);
  const std::vector<std::byte> summary = Summarize(layout, two, block, 4);
  EXPECT_THAT(As<float>(summary), ElementsAre(1, -2, 3, 0, -1, 1, 0, 5));
  // q = (1, 1): box 0 bounds 3 + 0, box 1 0 + 5.
  EXPECT_EQ(BlockBound(layout, two, std::vector<float>{1, 1}, summary, 0), 5.0f);
  // Three of the tokens: the second box holds token 2 alone.
  EXPECT_THAT(As<float>(Summarize(layout, two, block, 3)), ElementsAre(1, -2, 3, 0, -1, 5, -1, 5));
  // One token: the second box repeats the first.
  EXPECT_THAT(As<float>(Summarize(layout, two, block, 1)), ElementsAre(1, 0, 1, 0, 1, 0, 1, 0));
  std::vector<std::byte> bytes(summary.size());
  EXPECT_EQ(SummarizeBlock(layout, {.boxes = 3}, block, 4, bytes).code(),
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
    const std::vector<std::byte> summary = Summarize(layout, tokens, block, layout.block_tokens);
    const auto head_dim = static_cast<size_t>(layout.head_dim);
    const std::vector<float> query = RandomFloats(rng, head_dim, 1.0f);
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      float best = -std::numeric_limits<float>::infinity();
      for (int32_t t = 0; t < layout.block_tokens; ++t) {
        float dot = 0.0f;
        for (size_t d = 0; d < head_dim; ++d) {
          // The row of a one-key box is the key: the product, rounded before it is added
          // (volatile: the library is built without contraction, this test may not be).
          const volatile float product =
              query[d] * Key(layout, block, h, t, static_cast<int32_t>(d));
          dot += product;
        }
        best = std::max(best, dot);
      }
      ASSERT_EQ(BlockBound(layout, tokens, query, summary, h), best) << "trial " << trial;
    }
  }
}

// The compact fp32 store gives the estimate of both rows of every box kept in fp32, bit for bit,
// at every radius and box count, NaN keys included.
TEST(BlockEstimatorTest, F32BoundsAreTheTwoRowBoundsExactly) {
  std::mt19937 rng(23);
  for (int32_t trial = 0; trial < 120; ++trial) {
    const PagedKvLayout layout{.block_tokens = 8 * (1 + static_cast<int32_t>(rng() % 4)),
                               .num_kv_heads = 1 + static_cast<int32_t>(rng() % 3),
                               .head_dim = 1 + static_cast<int32_t>(rng() % 70)};
    std::vector<float> block = RandomFloats(rng, static_cast<size_t>(layout.block_elems()), 2.0f);
    if (trial % 4 == 0) {  // a NaN key, and a channel of one head whose keys are all NaN
      Key(layout, block, 0, 0, 0) = kNan;
      for (int32_t t = 0; t < layout.block_tokens; ++t) {
        Key(layout, block, layout.num_kv_heads - 1, t, layout.head_dim - 1) = kNan;
      }
    }
    const int32_t tokens = 1 + static_cast<int32_t>(rng() % layout.block_tokens);
    const std::vector<float> query = RandomFloats(rng, static_cast<size_t>(layout.head_dim), 1.0f);
    for (const float radius : {0.0f, 0.5f, 1.0f}) {
      for (const int32_t boxes : {1, 2, 8, layout.block_tokens}) {
        const BlockEstimator estimator{.boxes = boxes, .radius = radius};
        const std::vector<std::byte> summary = Summarize(layout, estimator, block, tokens);
        for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
          const float bound = BlockBound(layout, estimator, query, summary, h);
          const float expected = TwoRowBound(layout, estimator, block, tokens, h, query);
          ASSERT_TRUE(SameValue(bound, expected))
              << "trial " << trial << " " << EstimatorName(estimator, layout.block_tokens)
              << " head " << h << ": " << bound << " != " << expected;
        }
      }
    }
  }
}

// bf16, int8 and int4 bounds stay near the fp32 one: each stored value is off by at most half a
// step (bf16: 2^-9 of it; int8 and int4: half its row's scale, the row's largest magnitude / 254
// or / 14), so a box's bound by at most the sum over channels of |q| times that; allowed twice as
// much. int4 needs an even head_dim.
TEST(BlockEstimatorTest, CompactPrecisionsBoundNearF32) {
  std::mt19937 rng(29);
  for (int32_t trial = 0; trial < 60; ++trial) {
    const PagedKvLayout layout{.block_tokens = 16,
                               .num_kv_heads = 1 + static_cast<int32_t>(rng() % 2),
                               .head_dim = 1 + static_cast<int32_t>(rng() % 130)};
    std::vector<float> block = RandomFloats(rng, static_cast<size_t>(layout.block_elems()), 1.0f);
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      for (int32_t t = 0; t < layout.block_tokens; ++t) {
        for (int32_t d = 0; d < layout.head_dim; ++d) Key(layout, block, h, t, d) += d % 5 - 2;
      }
    }
    const std::vector<float> query = RandomFloats(rng, static_cast<size_t>(layout.head_dim), 1.0f);
    for (const float radius : {0.0f, 0.5f, 1.0f}) {
      for (const int32_t boxes : {1, 4}) {
        const BlockEstimator f32{.boxes = boxes, .radius = radius};
        const std::vector<std::byte> f32_summary = Summarize(layout, f32, block, 16);
        const std::vector<float> rows = As<float>(f32_summary);
        const auto box_rows = static_cast<size_t>(SummaryBoxRows(f32));
        const auto dim = static_cast<size_t>(layout.head_dim);
        for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
          // Per box: sum |q| * max |row value| a channel, and sum |q| * the rows' largest |value|.
          double bf16_allowance = 0.0;
          double int8_allowance = 0.0;
          double int4_allowance = 0.0;
          for (size_t box = 0; box < static_cast<size_t>(boxes); ++box) {
            const float* lo = rows.data() + (h * boxes + box) * box_rows * dim;
            const float* hi = lo + (box_rows - 1) * dim;
            double magnitude = 0.0;
            double largest = 0.0;
            double q_sum = 0.0;
            for (size_t d = 0; d < dim; ++d) {
              const double value = std::max(std::abs(double{lo[d]}), std::abs(double{hi[d]}));
              magnitude += std::abs(double{query[d]}) * value;
              largest = std::max(largest, value);
              q_sum += std::abs(double{query[d]});
            }
            bf16_allowance = std::max(bf16_allowance, 2 * magnitude / 512);
            int8_allowance = std::max(int8_allowance, 2 * q_sum * largest / 254);
            int4_allowance = std::max(int4_allowance, 2 * q_sum * largest / 14);
          }
          const float expected = BlockBound(layout, f32, query, f32_summary, h);
          std::vector<std::pair<SummaryPrecision, double>> precisions = {
              {SummaryPrecision::kBf16, bf16_allowance}, {SummaryPrecision::kInt8, int8_allowance}};
          if (dim % 2 == 0) precisions.emplace_back(SummaryPrecision::kInt4, int4_allowance);
          for (const auto& [precision, allowance] : precisions) {
            const BlockEstimator compact{.boxes = boxes, .radius = radius, .precision = precision};
            const float bound =
                BlockBound(layout, compact, query, Summarize(layout, compact, block, 16), h);
            ASSERT_NEAR(bound, expected, allowance)
                << "trial " << trial << " " << EstimatorName(compact, layout.block_tokens);
          }
        }
      }
    }
  }
}

TEST(BlockEstimatorTest, Bf16RowsRoundToNearestEven) {
  const PagedKvLayout layout{.block_tokens = 1, .num_kv_heads = 1, .head_dim = 4};
  const std::vector<float> block = {1.0f + 1.0f / 256, -0.3f, 0.126f, 12.7f, 0, 0, 0, 0};
  const BlockEstimator bf16{.precision = SummaryPrecision::kBf16};
  EXPECT_EQ(SummaryBytes(layout, bf16), 4 * 2);
  const std::vector<uint16_t> bits = As<uint16_t>(Summarize(layout, bf16, block, 1));
  // 1 + 2^-8 is a tie between bf16's 1 and 1 + 2^-7: to even, 1.
  EXPECT_EQ(Bf16ToF32(bits[0]), 1.0f);
  EXPECT_EQ(Bf16ToF32(bits[3]), 12.6875f);
  for (size_t d = 0; d < 4; ++d) EXPECT_EQ(bits[d], F32ToBf16(block[d])) << d;
  // Two rows above radius 0, the minimum first.
  const BlockEstimator two_rows{.radius = 1.0f, .precision = SummaryPrecision::kBf16};
  EXPECT_EQ(SummaryBytes(layout, two_rows), 2 * 4 * 2);
  EXPECT_EQ(As<uint16_t>(Summarize(layout, two_rows, block, 1)),
            std::vector<uint16_t>(
                {bits[0], bits[1], bits[2], bits[3], bits[0], bits[1], bits[2], bits[3]}));
}

// Two tokens, one KV head of 4 dims, at radius 1: the minimum row (-2.54, -0.3, 0, 0) and the
// maximum row (1 + 2^-8, 0, 0.126, 12.7) as int8 values, then their scales.
TEST(BlockEstimatorTest, Int8RowsKeepTheirScalesAfterTheValues) {
  const PagedKvLayout layout{.block_tokens = 2, .num_kv_heads = 1, .head_dim = 4};
  const std::vector<float> block = {1.0f + 1.0f / 256,
                                    -0.3f,
                                    0.126f,
                                    12.7f,  // token 0
                                    -2.54f,
                                    0,
                                    0,
                                    0,  // token 1
                                    0,
                                    0,
                                    0,
                                    0,
                                    0,
                                    0,
                                    0,
                                    0};
  const BlockEstimator int8{.radius = 1.0f, .precision = SummaryPrecision::kInt8};
  EXPECT_EQ(SummaryBytes(layout, int8), 2 * (4 + 4));
  const std::vector<std::byte> summary = Summarize(layout, int8, block, 2);
  EXPECT_THAT(As<int8_t>(std::span(summary).first(8)), ElementsAre(-127, -15, 0, 0, 10, 0, 1, 127));
  const std::vector<float> scales = As<float>(std::span(summary).subspan(8));
  EXPECT_THAT(scales, ElementsAre(2.54f / 127.0f, 12.7f / 127.0f));
  // Read back as q * scale: q = (1, 1, 1, 1) takes the larger of each channel's values.
  float expected = 0.0f;
  for (const float value : {10 * scales[1], 0 * scales[1], 1 * scales[1], 127 * scales[1]}) {
    expected += value;
  }
  EXPECT_EQ(BlockBound(layout, int8, std::vector<float>{1, 1, 1, 1}, summary, 0), expected);
}

TEST(BlockEstimatorTest, Int8RowsOfZerosNonFiniteOrTinyValues) {
  const PagedKvLayout layout{.block_tokens = 1, .num_kv_heads = 1, .head_dim = 3};
  const BlockEstimator int8{.precision = SummaryPrecision::kInt8};
  const std::vector<float> query = {1, 1, 1};
  const auto summarize = [&](float a, float b, float c) {
    const std::vector<float> block = {a, b, c, 0, 0, 0};
    return Summarize(layout, int8, block, 1);
  };
  // Zeros: scale 0, values 0.
  std::vector<std::byte> summary = summarize(0, 0, 0);
  EXPECT_THAT(As<int8_t>(std::span(summary).first(3)), ElementsAre(0, 0, 0));
  EXPECT_EQ(As<float>(std::span(summary).subspan(3))[0], 0.0f);
  EXPECT_EQ(BlockBound(layout, int8, query, summary, 0), 0.0f);
  // A NaN or an infinity: a NaN scale, so the row and its bound read as NaN.
  for (const float bad : {kNan, std::numeric_limits<float>::infinity()}) {
    summary = summarize(1, bad, 2);
    EXPECT_TRUE(std::isnan(As<float>(std::span(summary).subspan(3))[0])) << bad;
    EXPECT_TRUE(std::isnan(BlockBound(layout, int8, query, summary, 0))) << bad;
  }
  // A subnormal scale rounds coarsely: 190 of the smallest subnormal over 127 is 1.5 of it,
  // rounded to 1, and 190 steps clamp to 127.
  const float tiny = std::numeric_limits<float>::denorm_min();
  summary = summarize(190 * tiny, -2 * tiny, 0);
  EXPECT_EQ(As<float>(std::span(summary).subspan(3))[0], tiny);
  EXPECT_THAT(As<int8_t>(std::span(summary).first(3)), ElementsAre(127, -2, 0));
}

TEST(BlockEstimatorTest, Int4PacksTwoValuesAByte) {
  for (int low = -8; low <= 7; ++low) {
    for (int high = -8; high <= 7; ++high) {
      const uint8_t packed = PackInt4(static_cast<int8_t>(low), static_cast<int8_t>(high));
      EXPECT_EQ(packed & 0x0F, low & 0x0F);
      EXPECT_EQ(LowInt4(packed), low);
      EXPECT_EQ(HighInt4(packed), high);
    }
  }
}

// The rows of Int8RowsKeepTheirScalesAfterTheValues at int4: the minimum row (-2.54, -0.3, 0, 0)
// at a scale of 2.54 / 7 is (-7, -1, 0, 0), the maximum row (1 + 2^-8, 0, 0.126, 12.7) at 12.7 / 7
// is (1, 0, 0, 7); two values a byte, the even channel low, then the two scales.
TEST(BlockEstimatorTest, Int4RowsPackTwoValuesAByteThenTheirScales) {
  const PagedKvLayout layout{.block_tokens = 2, .num_kv_heads = 1, .head_dim = 4};
  std::vector<float> block(16, 0.0f);
  const float keys[] = {1.0f + 1.0f / 256, -0.3f, 0.126f, 12.7f, -2.54f, 0, 0, 0};
  std::copy(std::begin(keys), std::end(keys), block.begin());
  const BlockEstimator int4{.radius = 1.0f, .precision = SummaryPrecision::kInt4};
  EXPECT_EQ(SummaryBytes(layout, int4), 2 * (2 + 4));
  const std::vector<std::byte> summary = Summarize(layout, int4, block, 2);
  EXPECT_THAT(As<uint8_t>(std::span(summary).first(4)), ElementsAre(0xF9, 0x00, 0x01, 0x70));
  const std::vector<float> scales = As<float>(std::span(summary).subspan(4));
  EXPECT_THAT(scales, ElementsAre(2.54f / 7.0f, 12.7f / 7.0f));
  float expected = 0.0f;
  for (const float value : {1 * scales[1], 0 * scales[1], 0 * scales[1], 7 * scales[1]}) {
    expected += value;
  }
  EXPECT_EQ(BlockBound(layout, int4, std::vector<float>{1, 1, 1, 1}, summary, 0), expected);
}

TEST(BlockEstimatorTest, Int4RowsOfZerosNonFiniteOrTinyValues) {
  const PagedKvLayout layout{.block_tokens = 1, .num_kv_heads = 1, .head_dim = 4};
  const BlockEstimator int4{.precision = SummaryPrecision::kInt4};
  const std::vector<float> query = {1, 1, 1, 1};
  const auto summarize = [&](float a, float b) {
    const std::vector<float> block = {a, b, 0, 0, 0, 0, 0, 0};
    return Summarize(layout, int4, block, 1);
  };
  std::vector<std::byte> summary = summarize(0, 0);
  EXPECT_THAT(As<uint8_t>(std::span(summary).first(2)), ElementsAre(0, 0));
  EXPECT_EQ(As<float>(std::span(summary).subspan(2))[0], 0.0f);
  EXPECT_EQ(BlockBound(layout, int4, query, summary, 0), 0.0f);
  for (const float bad : {kNan, std::numeric_limits<float>::infinity()}) {
    summary = summarize(1, bad);
    EXPECT_TRUE(std::isnan(As<float>(std::span(summary).subspan(2))[0])) << bad;
    EXPECT_TRUE(std::isnan(BlockBound(layout, int4, query, summary, 0))) << bad;
  }
  // 10 of the smallest subnormal over 7 rounds to 1 of it, and 10 steps clamp to 7.
  const float tiny = std::numeric_limits<float>::denorm_min();
  summary = summarize(10 * tiny, -2 * tiny);
  EXPECT_EQ(As<float>(std::span(summary).subspan(2))[0], tiny);
  EXPECT_THAT(As<uint8_t>(std::span(summary).first(2)), ElementsAre(0xE7, 0x00));
}

// A box whose bound is NaN leaves the block the other boxes' best, at every precision; a block
// whose boxes are all NaN bounds NaN.
TEST(BlockEstimatorTest, NanBoxesAtEveryPrecision) {
  const PagedKvLayout layout{.block_tokens = 2, .num_kv_heads = 1, .head_dim = 2};
  const std::vector<float> block = {kNan, 1, 2, 3, 0, 0, 0, 0};  // keys (NaN, 1) | (2, 3)
  const PagedKvLayout one_token{.block_tokens = 1, .num_kv_heads = 1, .head_dim = 2};
  const std::vector<float> second_box = {2, 3, 0, 0};
  const std::vector<float> query = {1, 1};
  for (const SummaryPrecision precision : {SummaryPrecision::kF32, SummaryPrecision::kBf16,
                                           SummaryPrecision::kInt8, SummaryPrecision::kInt4}) {
    const BlockEstimator two{.boxes = 2, .precision = precision};
    const BlockEstimator one{.precision = precision};
    SCOPED_TRACE(EstimatorName(two, 2));
    EXPECT_EQ(BlockBound(layout, two, query, Summarize(layout, two, block, 2), 0),
              BlockBound(one_token, one, query, Summarize(one_token, one, second_box, 1), 0));
    const std::vector<float> nan_channel = {kNan, 1, kNan, 3, 0, 0, 0, 0};
    EXPECT_TRUE(
        std::isnan(BlockBound(layout, one, query, Summarize(layout, one, nan_channel, 2), 0)));
  }
}

// Log-sum-exp merges the boxes' bounds at the attention's scale: with a box a token the block's
// estimate is the logit whose softmax weight is its keys' weights together. A NaN box counts for
// nothing; one box a block is its bound.
TEST(BlockEstimatorTest, LogSumExpMergesTheBoxesAtTheAttentionScale) {
  const PagedKvLayout layout{.block_tokens = 4, .num_kv_heads = 1, .head_dim = 4};
  std::vector<float> block(static_cast<size_t>(layout.block_elems()), 0.0f);
  const float keys[4][4] = {{1, 0, 0, 0}, {0, 2, 0, 0}, {1, 1, 1, 1}, {-3, 0, 0, 0}};
  for (int32_t t = 0; t < 4; ++t) {
    for (int32_t d = 0; d < 4; ++d) Key(layout, block, 0, t, d) = keys[t][d];
  }
  const std::vector<float> query = {1, 1, 1, 1};  // dots 1, 2, 4, -3
  const BlockEstimator tokens{.boxes = 4, .combine = BoxCombine::kLogSumExp};
  const double scale = 0.5;  // 1 / sqrt(4)
  const auto merged = [&](std::initializer_list<double> dots) {
    double total = 0;
    for (const double dot : dots) total += std::exp(scale * dot);
    return std::log(total) / scale;
  };
  EXPECT_FLOAT_EQ(LogSumExpScale(4), 0.5f);
  EXPECT_NEAR(BlockBound(layout, tokens, query, Summarize(layout, tokens, block, 4), 0),
              merged({1, 2, 4, -3}), 1e-5);
  Key(layout, block, 0, 1, 1) = kNan;
  EXPECT_NEAR(BlockBound(layout, tokens, query, Summarize(layout, tokens, block, 4), 0),
              merged({1, 4, -3}), 1e-5);
  for (int32_t t = 0; t < 4; ++t) Key(layout, block, 0, t, 0) = kNan;
  EXPECT_TRUE(
      std::isnan(BlockBound(layout, tokens, query, Summarize(layout, tokens, block, 4), 0)));
  const BlockEstimator quest{.radius = 1.0f};
  BlockEstimator quest_lse = quest;
  quest_lse.combine = BoxCombine::kLogSumExp;
  std::mt19937 rng(5);
  const std::vector<float> finite =
      RandomFloats(rng, static_cast<size_t>(layout.block_elems()), 1.0f);
  EXPECT_EQ(BlockBound(layout, quest_lse, query, Summarize(layout, quest_lse, finite, 4), 0),
            BlockBound(layout, quest, query, Summarize(layout, quest, finite, 4), 0));
}

TEST(BlockEstimatorTest, NamesAndBytes) {
  const PagedKvLayout layout{.block_tokens = 32, .num_kv_heads = 2, .head_dim = 64};
  for (const char* name : {"box-r0", "box-r1", "boxes4-r0.5", "tokens-r0-int8", "boxes8-r0-bf16",
                           "tokens-r0-int4", "tokens-r0-int4-lse", "boxes2-r1-lse"}) {
    const absl::StatusOr<BlockEstimator> estimator = ParseEstimator(name);
    ASSERT_TRUE(estimator.ok()) << name << ": " << estimator.status();
    EXPECT_EQ(EstimatorName(*estimator, 32), name);
  }
  for (const char* bad : {"", "box", "box-0", "boxes-r0", "boxesx-r0", "box-r0-fp8", "box-rx",
                          "box-lse", "box-r0-lse-int4", "box-r0-int4-lse-lse"}) {
    EXPECT_EQ(ParseEstimator(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // Quest's box in fp32: 2 heads x 2 rows x 64 floats; the center alone at radius 0.
  EXPECT_EQ(SummaryBoxRows({.radius = 1.0f}), 2);
  EXPECT_EQ(SummaryBoxRows({.radius = 0.5f}), 2);
  EXPECT_EQ(SummaryBoxRows({}), 1);
  EXPECT_EQ(SummaryBytes(layout, {.radius = 1.0f}), 2 * 2 * 64 * 4);
  EXPECT_EQ(SummaryBytes(layout, {}), 2 * 64 * 4);
  EXPECT_EQ(
      SummaryBytes(layout, {.boxes = 4, .radius = 0.5f, .precision = SummaryPrecision::kBf16}),
      2 * 4 * 2 * 64 * 2);
  // Every key in int8 with a scale each: 2 heads x 32 tokens x (64 + 4) bytes.
  EXPECT_EQ(SummaryBytes(layout, {.boxes = 32, .precision = SummaryPrecision::kInt8}), 2 * 32 * 68);
  // And in int4, two a byte: 2 heads x 32 tokens x (32 + 4) bytes; an odd head_dim cannot pack.
  EXPECT_EQ(SummaryBytes(layout, {.boxes = 32, .precision = SummaryPrecision::kInt4}), 2 * 32 * 36);
  EXPECT_EQ(ValidateEstimator({.precision = SummaryPrecision::kInt4},
                              {.block_tokens = 4, .num_kv_heads = 1, .head_dim = 3})
                .code(),
            absl::StatusCode::kInvalidArgument);
  // 6 query heads against 4 boxes of 64 channels: one product each at radius 0, two above.
  EXPECT_EQ(ScoreMultiplyAdds(layout, {.boxes = 4}, 6), 6 * 4 * 64);
  EXPECT_EQ(ScoreMultiplyAdds(layout, {.boxes = 4, .radius = 0.5f}, 6), 6 * 4 * 2 * 64);
  // No boxes means one a token, whatever the block size.
  EXPECT_TRUE(ValidateEstimator({.boxes = 0}, layout).ok());
  EXPECT_EQ(ForBlocks({.boxes = 0}, 32).boxes, 32);
  EXPECT_EQ(ForBlocks({.boxes = 4}, 32).boxes, 4);
  EXPECT_EQ(SummaryBytes(layout, {.boxes = 0}), SummaryBytes(layout, {.boxes = 32}));
  EXPECT_EQ(EstimatorName({.boxes = 0}, 8), "tokens-r0");
  EXPECT_EQ(ParseEstimator("tokens-r0")->boxes, 0);
  EXPECT_FALSE(ValidateEstimator({.boxes = -1}, layout).ok());
  EXPECT_FALSE(ValidateEstimator({.boxes = 5}, layout).ok());
  EXPECT_FALSE(ValidateEstimator({.radius = 2.0f}, layout).ok());
}

// Two segments of a step's bounds (3 heads x 5 candidates): the first takes candidates 0-2 of
// every head as one set, by max; the second candidates 3-4 as three one-head sets, by softmax.
// Synthetic picks at a reuse R draw about 1 - R of a segment's scores again each step, the same
// ones for the same inputs; each set and layer its own; a bad period or segment is refused.
TEST(DrawSyntheticScoresTest, RedrawAboutOneMinusTheReuseOfTheScoresAStep) {
  constexpr int32_t kCount = 2000;
  const std::vector<ScoreSegment> segments = {{.first = 0, .count = kCount, .num_sets = 2}};
  std::vector<int32_t> ids(kCount);
  for (int32_t i = 0; i < kCount; ++i) ids[static_cast<size_t>(i)] = 3 * i + 1;
  for (const double reuse : {0.5, 0.85, 0.95}) {
    const SyntheticPicks picks = SyntheticPicksAt(reuse, 7);
    std::vector<float> before(2 * kCount);
    std::vector<float> after(2 * kCount);
    int64_t changed = 0;
    for (int32_t step = 1; step <= 40; ++step) {
      ASSERT_TRUE(DrawSyntheticScores(ids, segments, step, picks, 3, after).ok());
      if (step > 1) {
        for (size_t i = 0; i < after.size(); ++i) changed += after[i] != before[i];
      }
      std::swap(before, after);
    }
    const double share = static_cast<double>(changed) / (39.0 * 2 * kCount);
    EXPECT_NEAR(share, 1.0 - reuse, 0.02) << reuse;
    std::vector<float> again(2 * kCount);
    ASSERT_TRUE(DrawSyntheticScores(ids, segments, 40, picks, 3, again).ok());
    EXPECT_EQ(again, before);
    for (const float score : again) ASSERT_TRUE(score >= 0.0f && score < 1.0f) << score;
    // The two sets, and another layer, draw their own.
    EXPECT_NE(std::vector<float>(again.begin(), again.begin() + kCount),
              std::vector<float>(again.begin() + kCount, again.end()));
    std::vector<float> other_layer(2 * kCount);
    ASSERT_TRUE(DrawSyntheticScores(ids, segments, 40, picks, 4, other_layer).ok());
    EXPECT_NE(other_layer, again);
  }
  std::vector<float> scores(2 * kCount);
  EXPECT_EQ(DrawSyntheticScores(ids, segments, 1, {.period_q = 1023}, 0, scores).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DrawSyntheticScores(std::span(ids).first(10), segments, 1, SyntheticPicksAt(0.5, 1), 0,
                                scores)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

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
