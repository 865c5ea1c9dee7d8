// Decode steps replayed as graphs (ModelRunnerOptions::decode_graphs) on each backend (CUDA
// skipped without a device): the logits are bitwise those of the same steps run op by op, while
// the batch shrinks and a sequence grows past a block-table width, and after another runner of
// the backend moved the scratch memory a graph reads. The CPU backend has no graphs: there the
// option changes nothing and no graph is launched.
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/backend_model.h"
#include "tests/unit/bitwise_logits.h"

namespace pulse {
namespace {

using ::pulse::testing::ExpectBitwiseEqual;

constexpr int32_t kBlockTokens = 16;
constexpr int32_t kBlocksPerSeq = 96;  // 1536 tokens: past the 1024-token width granule
constexpr int32_t kMaxSeqs = 3;

class GraphBackendTest : public ::pulse::testing::BackendModelTest {
 protected:
  void SetUp() override { LoadOnBackend(::pulse::testing::SmallConfig(2048), 11); }

  bool HasGraphs() const { return model_->backend().SupportsGraphs(); }

  ModelRunner MakeRunner(bool graphs) {
    const ModelConfig& config = model_->config();
    absl::StatusOr<KvCache> cache = KvCache::Create(model_->backend(),
                                                    {.block_tokens = kBlockTokens,
                                                     .num_kv_heads = config.num_kv_heads,
                                                     .head_dim = config.head_dim,
                                                     .type = model_->backend().kv_type()},
                                                    config.num_layers, kMaxSeqs * kBlocksPerSeq);
    EXPECT_TRUE(cache.ok()) << cache.status();
    absl::StatusOr<ModelRunner> runner = ModelRunner::Create(model_, *std::move(cache),
                                                             {.max_step_tokens = 1024,
                                                              .max_seqs = kMaxSeqs,
                                                              .max_blocks_per_seq = kBlocksPerSeq,
                                                              .decode_graphs = graphs});
    EXPECT_TRUE(runner.ok()) << runner.status();
    return *std::move(runner);
  }

  // Sequences of the given prompt lengths, prefilled one a step, then `steps` decode steps of
  // them all (the last one leaves after `last_leaves_after` steps); each decode step's logits,
  // [sequences][vocab].
  std::vector<std::vector<float>> Decode(ModelRunner& runner, const std::vector<int32_t>& prompts,
                                         int32_t steps, int32_t last_leaves_after) {
    const int32_t vocab = model_->config().vocab_size;
    const auto token = [vocab](size_t seq, int32_t position) {
      return static_cast<int32_t>((seq * 131 + static_cast<size_t>(position) * 7919 + 13) %
                                  static_cast<size_t>(vocab));
    };
    std::vector<std::vector<int32_t>> blocks(prompts.size());
    StepBatch batch;
    std::vector<float> none;
    for (size_t s = 0; s < prompts.size(); ++s) {
      blocks[s].resize(kBlocksPerSeq);
      std::iota(blocks[s].begin(), blocks[s].end(), static_cast<int32_t>(s) * kBlocksPerSeq);
      std::vector<int32_t> prompt(static_cast<size_t>(prompts[s]));
      for (int32_t i = 0; i < prompts[s]; ++i) prompt[static_cast<size_t>(i)] = token(s, i);
      batch.Clear();
      const auto used = static_cast<size_t>((prompts[s] + kBlockTokens - 1) / kBlockTokens);
      batch.AddSequence(prompt, 0, std::span<const int32_t>(blocks[s]).first(used),
                        LogitRows::kNone);
      const absl::Status prefilled = runner.Forward(batch, none);
      EXPECT_TRUE(prefilled.ok()) << prefilled;
    }
    std::vector<std::vector<float>> logits;
    for (int32_t step = 0; step < steps; ++step) {
      const size_t seqs = step < last_leaves_after ? prompts.size() : prompts.size() - 1;
      batch.Clear();
      for (size_t s = 0; s < seqs; ++s) {
        const int32_t position = prompts[s] + step;
        const int32_t next = token(s, position);
        // The blocks the sequence has, as the engine's tables grow.
        const auto used = static_cast<size_t>(position / kBlockTokens + 1);
        batch.AddSequence(std::span<const int32_t>(&next, 1), position,
                          std::span<const int32_t>(blocks[s]).first(used), LogitRows::kLast);
      }
      logits.emplace_back(seqs * static_cast<size_t>(vocab));
      const absl::Status status = runner.Forward(batch, logits.back());
      EXPECT_TRUE(status.ok()) << status;
    }
    return logits;
  }
};

TEST_P(GraphBackendTest, ReplayedStepsAreTheStepsRunOpByOp) {
  // The first sequence crosses 1024 tokens at decode step 24, the third leaves after step 12:
  // shapes (3 sequences, 64 blocks wide), (2, 64), (2, 96).
  const std::vector<int32_t> prompts = {1000, 700, 40};
  ModelRunner eager = MakeRunner(false);
  const std::vector<std::vector<float>> expected = Decode(eager, prompts, 40, 12);
  ModelRunner graphed = MakeRunner(true);
  const std::vector<std::vector<float>> got = Decode(graphed, prompts, 40, 12);
  ExpectBitwiseEqual(expected, got);

  EXPECT_EQ(eager.graph_stats().launched, 0);
  const GraphStats& stats = graphed.graph_stats();
  EXPECT_EQ(stats.failed, 0);
  if (HasGraphs()) {
    EXPECT_EQ(stats.captured, 3);
    // Each shape's first step runs op by op; every later one replays its graph.
    EXPECT_EQ(stats.launched, 40 - 3);
  } else {
    EXPECT_EQ(stats.captured, 0);
    EXPECT_EQ(stats.launched, 0);
  }
}

TEST_P(GraphBackendTest, AGraphWhoseScratchMovedIsCapturedAgain) {
  ModelRunner eager = MakeRunner(false);
  const std::vector<std::vector<float>> expected_before = Decode(eager, {30}, 4, 4);
  ModelRunner graphed = MakeRunner(true);
  const std::vector<std::vector<float>> before = Decode(graphed, {30}, 4, 4);
  ExpectBitwiseEqual(expected_before, before);

  // A larger step of another runner grows the backend's attention scratch.
  ModelRunner other = MakeRunner(false);
  Decode(other, {1000, 1000, 1000}, 1, 1);

  const std::vector<std::vector<float>> expected_after = Decode(eager, {30}, 4, 4);
  const std::vector<std::vector<float>> after = Decode(graphed, {30}, 4, 4);
  ExpectBitwiseEqual(expected_after, after);
  if (HasGraphs()) {
    EXPECT_EQ(graphed.graph_stats().captured, 2);
    EXPECT_EQ(graphed.graph_stats().launched, 3 + 4);
    EXPECT_EQ(graphed.graph_stats().failed, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GraphBackendTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pulse
