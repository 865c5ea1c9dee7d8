// PickCrossCheckBackend with the CPU backend as both primary and reference, over a tiny random
// model decoding sparsely: every pick of every selection is compared and is the reference's; with
// the primary's scores reversed, the picks differ and the counts say by how much.
#include "tests/tools/pick_crosscheck.h"

#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "core/model/tensor_source.h"
#include "gtest/gtest.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::Prompt;
using ::pulse::testing::TinyConfig;

constexpr int32_t kBlockTokens = 4;
constexpr int32_t kBlocks = 40;  // 160 tokens
constexpr int32_t kPrompt = 120;
constexpr int32_t kDecode = 10;

std::shared_ptr<Backend> Cpu() {
  absl::StatusOr<std::shared_ptr<Backend>> backend = CreateCpuBackend({.threads = 1});
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.value_or(nullptr);
}

// Decodes kDecode tokens after a prompt of kPrompt on `backend`, one a step, selecting in `mode`
// with a budget of 32 tokens (a sink block and two window blocks leave 4 or 5 picks a set);
// returns the runner's statistics.
SparseAttentionStats Decode(std::shared_ptr<Backend> backend, SelectionMode mode) {
  const ModelConfig config = TinyConfig();
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenRandomSource(config, /*seed=*/7);
  EXPECT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::shared_ptr<const Model>> model =
      Model::Load(std::move(backend), **source, {.weight_type = DType::kF32});
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<KvCache> cache = KvCache::Create((*model)->backend(),
                                                  {.block_tokens = kBlockTokens,
                                                   .num_kv_heads = config.num_kv_heads,
                                                   .head_dim = config.head_dim},
                                                  config.num_layers, kBlocks);
  EXPECT_TRUE(cache.ok()) << cache.status();
  absl::StatusOr<ModelRunner> runner =
      ModelRunner::Create(*model, *std::move(cache),
                          {.max_step_tokens = kPrompt,
                           .max_seqs = 1,
                           .max_blocks_per_seq = kBlocks,
                           .offload = OffloadConfig{.selection = {.mode = mode}}});
  EXPECT_TRUE(runner.ok()) << runner.status();
  const SparseSelection sparse{.options = {.mode = mode,
                                           .budget_tokens = 32,
                                           .sink_tokens = kBlockTokens,
                                           .window_tokens = 2 * kBlockTokens},
                               .key = 1};
  const std::vector<int32_t> tokens = Prompt(kPrompt + kDecode, config.vocab_size, 11);
  std::vector<int32_t> blocks(kBlocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  StepBatch batch;
  batch.AddSequence(std::span(tokens).first(kPrompt), 0, blocks, LogitRows::kNone, sparse);
  std::vector<float> logits;
  EXPECT_TRUE(runner->Forward(batch, logits).ok());
  logits.resize(static_cast<size_t>(config.vocab_size));
  for (int32_t position = kPrompt; position < kPrompt + kDecode; ++position) {
    batch.Clear();
    batch.AddSequence(std::span(tokens).subspan(position, 1), position, blocks, LogitRows::kLast,
                      sparse);
    const absl::Status status = runner->Forward(batch, logits);
    EXPECT_TRUE(status.ok()) << status;
  }
  return runner->sparse_stats();
}

TEST(PickCrossCheckTest, TheCpuBackendPicksAsItself) {
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    const auto backend = std::make_shared<PickCrossCheckBackend>(Cpu(), Cpu());
    const SparseAttentionStats runner = Decode(backend, mode);
    const PickCrossCheckStats stats = backend->TakeStats();
    EXPECT_TRUE(stats.error.ok()) << stats.error;
    EXPECT_EQ(stats.selections, runner.selections);
    EXPECT_EQ(stats.picks, runner.picked_blocks);
    EXPECT_GT(stats.picks, 0);
    EXPECT_EQ(stats.same, stats.picks);
    EXPECT_EQ(backend->TakeStats().picks, 0);
  }
}

// Negates the primary's scores once the decorator has shadowed them: the primary then picks the
// candidates the reference ranks last.
class ReversedScoresBackend : public PickCrossCheckBackend {
 public:
  using PickCrossCheckBackend::PickCrossCheckBackend;

  void AggregateScores(const float* bounds, int32_t num_heads, int64_t bound_stride,
                       const ScoreSegment* segments, int32_t num_segments, int32_t max_sets,
                       float* scores) override {
    PickCrossCheckBackend::AggregateScores(bounds, num_heads, bound_stride, segments, num_segments,
                                           max_sets, scores);
    for (const ScoreSegment& segment : std::span(segments, static_cast<size_t>(num_segments))) {
      for (int32_t i = 0; i < segment.num_sets * segment.count; ++i) {
        scores[segment.scores_first + i] = -scores[segment.scores_first + i];
      }
    }
  }
};

TEST(PickCrossCheckTest, ReversedScoresPickDifferently) {
  const auto backend = std::make_shared<ReversedScoresBackend>(Cpu(), Cpu());
  const SparseAttentionStats runner = Decode(backend, SelectionMode::kSoloHead);
  const PickCrossCheckStats stats = backend->TakeStats();
  EXPECT_TRUE(stats.error.ok()) << stats.error;
  EXPECT_EQ(stats.picks, runner.picked_blocks);
  EXPECT_LT(stats.same, stats.picks);
  const int64_t differing =
      std::accumulate(stats.differing.begin(), stats.differing.end(), int64_t{0});
  EXPECT_EQ(stats.same + differing, stats.picks);
  EXPECT_GT(stats.differing.back(), 0);
}

}  // namespace
}  // namespace pulse
