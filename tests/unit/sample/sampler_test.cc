#include "core/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Logits whose softmax is `probs`.
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (const double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

int32_t SampleOnce(const SamplingParams& params, const std::vector<float>& logits,
                   const std::vector<int32_t>& history = {}) {
  Sampler sampler(params);
  const absl::StatusOr<int32_t> token = sampler.Sample(logits, history);
  EXPECT_TRUE(token.ok()) << token.status();
  return token.value_or(-1);
}

// How often each token is drawn in `draws` draws of one sampler.
std::map<int32_t, int32_t> Histogram(const SamplingParams& params, const std::vector<float>& logits,
                                     int32_t draws) {
  Sampler sampler(params);
  std::map<int32_t, int32_t> counts;
  for (int32_t i = 0; i < draws; ++i) ++counts[*sampler.Sample(logits, {})];
  return counts;
}

std::set<int32_t> Drawn(const std::map<int32_t, int32_t>& counts) {
  std::set<int32_t> ids;
  for (const auto& [id, count] : counts) ids.insert(id);
  return ids;
}

// Pearson's statistic of the counts against the expected probabilities.
double ChiSquare(const std::map<int32_t, int32_t>& counts, const std::vector<double>& probs,
                 int32_t draws) {
  double chi = 0.0;
  for (size_t id = 0; id < probs.size(); ++id) {
    const auto it = counts.find(static_cast<int32_t>(id));
    const double observed = it == counts.end() ? 0.0 : it->second;
    const double expected = probs[id] * draws;
    chi += (observed - expected) * (observed - expected) / expected;
  }
  return chi;
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  const SamplingParams greedy{.temperature = 0.0f};
  EXPECT_EQ(SampleOnce(greedy, {0.1f, 3.0f, -2.0f, 1.0f}), 1);
  EXPECT_EQ(SampleOnce(greedy, {0.5f, 2.0f, 2.0f, 2.0f}), 1);
  EXPECT_EQ(SampleOnce(greedy, {kNegInf, -5.0f, kNegInf}), 1);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  const SamplingParams params{.temperature = 0.0f, .repetition_penalty = 2.0f};
  // 2.0 / 2 = 1.0 falls below 1.5.
  EXPECT_EQ(SampleOnce(params, {2.0f, 1.5f}, {0}), 1);
  // -1.0 * 2 = -2.0 falls below -1.5.
  EXPECT_EQ(SampleOnce(params, {-1.0f, -1.5f}, {0}), 1);
  // Only ids in the history are penalised.
  EXPECT_EQ(SampleOnce(params, {2.0f, 1.5f}, {1}), 0);
  // An id repeated in the history is penalised once: 4.0 / 2 = 2.0 still beats 1.5.
  EXPECT_EQ(SampleOnce(params, {4.0f, 1.5f}, {0, 0, 0}), 0);
}

TEST(SamplerTest, TopKOneIsArgmax) {
  const std::vector<float> logits = {0.3f, 0.2f, 0.5f, 0.4f};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    EXPECT_EQ(SampleOnce({.top_k = 1, .seed = seed}, logits), 2);
  }
}

TEST(SamplerTest, TopKKeepsTheKBestWithTiesToTheLowerId) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.0f, 0.0f};
  const auto counts = Histogram({.top_k = 2}, logits, 2000);
  EXPECT_EQ(Drawn(counts), (std::set<int32_t>{1, 2}));
}

TEST(SamplerTest, TopPKeepsTheSmallestSetWithEnoughMass) {
  const std::vector<float> logits = LogitsOf({0.15, 0.5, 0.05, 0.3});
  EXPECT_EQ(Drawn(Histogram({.top_p = 0.45f}, logits, 2000)), (std::set<int32_t>{1}));
  EXPECT_EQ(Drawn(Histogram({.top_p = 0.75f}, logits, 2000)), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(Drawn(Histogram({.top_p = 0.9f}, logits, 2000)), (std::set<int32_t>{0, 1, 3}));
}

TEST(SamplerTest, TopPAppliesToTheTopKRenormalised) {
  // Top-2 leaves {1: 0.625, 3: 0.375}; top-p 0.6 of that keeps token 1 only. Without top-k the
  // same top-p keeps {1, 3}.
  const std::vector<float> logits = LogitsOf({0.15, 0.5, 0.05, 0.3});
  EXPECT_EQ(Drawn(Histogram({.top_k = 2, .top_p = 0.6f}, logits, 2000)), (std::set<int32_t>{1}));
  EXPECT_EQ(Drawn(Histogram({.top_p = 0.6f}, logits, 2000)), (std::set<int32_t>{1, 3}));
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheBest) {
  const std::vector<float> logits = LogitsOf({0.15, 0.5, 0.05, 0.3});
  // Threshold 0.2 * 0.5 = 0.1 drops token 2 (0.05).
  EXPECT_EQ(Drawn(Histogram({.min_p = 0.2f}, logits, 4000)), (std::set<int32_t>{0, 1, 3}));
  // Threshold 0.7 * 0.5 = 0.35 keeps token 1 only.
  EXPECT_EQ(Drawn(Histogram({.min_p = 0.7f}, logits, 1000)), (std::set<int32_t>{1}));
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {1.0f, 0.0f};
  constexpr int32_t kDraws = 4000;
  // p(0) = 1 / (1 + e^(-1/T)): T=0.25 gives 0.982, T=4 gives 0.562.
  const auto sharp = Histogram({.temperature = 0.25f}, logits, kDraws);
  const auto flat = Histogram({.temperature = 4.0f}, logits, kDraws);
  EXPECT_NEAR(sharp.at(0) / double{kDraws}, 1.0 / (1.0 + std::exp(-4.0)), 0.01);
  EXPECT_NEAR(flat.at(0) / double{kDraws}, 1.0 / (1.0 + std::exp(-0.25)), 0.025);
}

TEST(SamplerTest, TinyTemperatureAndWideLogitsStayFinite) {
  const std::vector<float> logits = {-3e38f, 3e38f, 1.0f};
  EXPECT_EQ(SampleOnce({.temperature = 1e-30f}, logits), 1);
  EXPECT_EQ(SampleOnce({.temperature = 1e-30f, .top_p = 0.5f, .min_p = 0.5f}, logits), 1);
}

TEST(SamplerTest, MaskedTokensAreNeverDrawn) {
  const std::vector<float> logits = {kNegInf, 0.0f, kNegInf, 0.0f};
  EXPECT_EQ(Drawn(Histogram({}, logits, 1000)), (std::set<int32_t>{1, 3}));
}

TEST(SamplerTest, SameSeedSameTokensOtherSeedOtherTokens) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> logits(1000);
  for (float& l : logits) l = normal(rng);
  const auto draw = [&](uint64_t seed) {
    Sampler sampler({.top_k = 50, .top_p = 0.9f, .seed = seed});
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < 64; ++i) tokens.push_back(*sampler.Sample(logits, tokens));
    return tokens;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(SamplerTest, GreedyDoesNotConsumeTheGenerator) {
  // A greedy request gives its argmax regardless of seed.
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f};
  for (uint64_t seed = 0; seed < 10; ++seed) {
    EXPECT_EQ(SampleOnce({.temperature = 0.0f, .seed = seed}, logits), 1);
  }
}

TEST(SamplerTest, DrawsFollowTheDistribution) {
  const std::vector<double> probs = {0.02, 0.08, 0.1, 0.3, 0.05, 0.2, 0.15, 0.1};
  constexpr int32_t kDraws = 20000;
  const auto counts = Histogram({.seed = 1234}, LogitsOf(probs), kDraws);
  // 7 degrees of freedom: P(chi^2 > 24.32) = 0.001.
  EXPECT_LT(ChiSquare(counts, probs, kDraws), 24.32);
}

TEST(SamplerTest, FilteredDrawsFollowTheRenormalisedDistribution) {
  // Top-p 0.7 keeps {3: 0.3, 5: 0.2, 6: 0.15, 2 or 7: 0.1 -> 2 (lower id)}: mass 0.75.
  const std::vector<double> probs = {0.02, 0.08, 0.1, 0.3, 0.05, 0.2, 0.15, 0.1};
  constexpr int32_t kDraws = 20000;
  const auto counts = Histogram({.top_p = 0.7f, .seed = 99}, LogitsOf(probs), kDraws);
  EXPECT_EQ(Drawn(counts), (std::set<int32_t>{2, 3, 5, 6}));
  std::vector<double> kept(probs.size(), 0.0);
  for (const int32_t id : {2, 3, 5, 6}) kept[id] = probs[id] / 0.75;
  double chi = 0.0;
  for (const int32_t id : {2, 3, 5, 6}) {
    const double expected = kept[id] * kDraws;
    chi += (counts.at(id) - expected) * (counts.at(id) - expected) / expected;
  }
  // 3 degrees of freedom: P(chi^2 > 16.27) = 0.001.
  EXPECT_LT(chi, 16.27);
}

TEST(SamplerTest, TopPOnALargeVocabularyMatchesAFullSort) {
  // A vocabulary the size of SmolLM2's with a nucleus of hundreds of tokens, so the partial sort
  // has to extend its prefix several times.
  constexpr size_t kVocab = 49152;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(rng);
  constexpr float kTopP = 0.5f;

  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  double total = 0.0;
  for (const float l : logits) total += std::exp(static_cast<double>(l) - logits[order[0]]);
  std::vector<int32_t> nucleus;  // best first
  double mass = 0.0;
  for (const int32_t id : order) {
    if (mass >= kTopP * total) break;
    mass += std::exp(static_cast<double>(logits[id]) - logits[order[0]]);
    nucleus.push_back(id);
  }
  ASSERT_GT(nucleus.size(), 256u);

  const std::set<int32_t> drawn = Drawn(Histogram({.top_p = kTopP, .seed = 5}, logits, 1000));
  const std::set<int32_t> allowed(nucleus.begin(), nucleus.end());
  EXPECT_TRUE(std::includes(allowed.begin(), allowed.end(), drawn.begin(), drawn.end()));
  // The draws reach the last quarter of the nucleus, so it was not cut short.
  const std::set<int32_t> tail(nucleus.begin() + static_cast<ptrdiff_t>(nucleus.size() * 3 / 4),
                               nucleus.end());
  EXPECT_TRUE(std::any_of(drawn.begin(), drawn.end(), [&](int32_t id) { return tail.count(id); }));
}

TEST(SamplerTest, NonFiniteLogitsAreAnError) {
  Sampler sampler({});
  const std::vector<float> nan = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  const absl::StatusOr<int32_t> token = sampler.Sample(nan, {});
  EXPECT_EQ(token.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(token.status().message(), ::testing::HasSubstr("logit 1"));
  const std::vector<float> inf = {std::numeric_limits<float>::infinity(), 0.0f};
  EXPECT_EQ(sampler.Sample(inf, {}).status().code(), absl::StatusCode::kDataLoss);
  const std::vector<float> masked = {kNegInf, kNegInf};
  EXPECT_EQ(sampler.Sample(masked, {}).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pulse
