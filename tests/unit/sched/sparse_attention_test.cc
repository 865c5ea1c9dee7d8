// Sparse decode attention through the ModelRunner on the CPU backend: with a budget that covers
// the context it is dense attention bit for bit, in both selection modes and next to prompt
// chunks; with a small budget it attends to fewer tokens, and its statistics say so.
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "gtest/gtest.h"
#include "tests/unit/bitwise_logits.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::ExpectBitwiseEqual;
using ::pulse::testing::Prompt;
using ::pulse::testing::TinyConfig;
using ::pulse::testing::TinyModel;

constexpr int32_t kBlockTokens = 4;
constexpr int32_t kBlocksPerSeq = 40;  // 160 tokens

// A runner over a cache of 80 blocks, with `offload` (a host tier when it sizes one).
absl::StatusOr<ModelRunner> CreateRunner(std::shared_ptr<const Model> model,
                                         std::optional<OffloadConfig> offload) {
  const ModelConfig& config = model->config();
  KvCache cache = *KvCache::Create(model->backend(),
                                   {.block_tokens = kBlockTokens,
                                    .num_kv_heads = config.num_kv_heads,
                                    .head_dim = config.head_dim},
                                   config.num_layers, 2 * kBlocksPerSeq);
  return ModelRunner::Create(std::move(model), std::move(cache),
                             {.max_step_tokens = 160,
                              .max_seqs = 2,
                              .max_blocks_per_seq = kBlocksPerSeq,
                              .offload = std::move(offload)});
}

// A runner with sparse attention over resident blocks in `mode` (no host tier), or without
// sparse attention when `mode` is empty.
ModelRunner MakeRunner(std::shared_ptr<const Model> model,
                       std::optional<SelectionMode> mode = std::nullopt, int32_t dense_layers = 0) {
  absl::StatusOr<ModelRunner> runner = CreateRunner(
      std::move(model), mode ? std::optional<OffloadConfig>(OffloadConfig{
                                   .selection = {.mode = *mode}, .dense_layers = dense_layers})
                             : std::nullopt);
  EXPECT_TRUE(runner.ok()) << runner.status();
  return *std::move(runner);
}

// One sequence of `tokens`: its prompt (all but `decode` tokens) in one chunk, then one token a
// step; returns the logits of every decode step. Blocks [first_block, first_block + 40).
std::vector<std::vector<float>> Decode(ModelRunner& runner, const std::vector<int32_t>& tokens,
                                       int32_t decode, int32_t first_block,
                                       const std::optional<SparseSelection>& sparse) {
  std::vector<int32_t> blocks(kBlocksPerSeq);
  std::iota(blocks.begin(), blocks.end(), first_block);
  const int32_t vocab = TinyConfig().vocab_size;
  const int32_t prompt = static_cast<int32_t>(tokens.size()) - decode;
  StepBatch batch;
  batch.AddSequence(std::span<const int32_t>(tokens).first(prompt), 0, blocks, LogitRows::kNone,
                    sparse);
  std::vector<float> none;
  const absl::Status prefilled = runner.Forward(batch, none);
  EXPECT_TRUE(prefilled.ok()) << prefilled;
  std::vector<std::vector<float>> logits;
  for (int32_t i = prompt; i < static_cast<int32_t>(tokens.size()); ++i) {
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(tokens).subspan(i, 1), i, blocks, LogitRows::kLast,
                      sparse);
    logits.emplace_back(vocab);
    const absl::Status status = runner.Forward(batch, logits.back());
    EXPECT_TRUE(status.ok()) << status;
  }
  return logits;
}

SparseSelection Selection(SelectionMode mode, int32_t budget) {
  return {.options = {.mode = mode,
                      .budget_tokens = budget,
                      .sink_tokens = kBlockTokens,
                      .window_tokens = 2 * kBlockTokens},
          .key = 1};
}

TEST(SparseAttentionTest, ABudgetCoveringTheContextIsDenseAttentionBitwise) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 11);
  ModelRunner dense_runner = MakeRunner(model);
  const auto dense = Decode(dense_runner, tokens, 20, 0, std::nullopt);
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    ModelRunner runner = MakeRunner(model, mode);
    ExpectBitwiseEqual(Decode(runner, tokens, 20, 0, Selection(mode, 1 << 20)), dense);
    const SparseAttentionStats stats = runner.sparse_stats();
    EXPECT_GT(stats.selections, 0);
    EXPECT_EQ(stats.attended_tokens, stats.context_tokens);
    EXPECT_EQ(stats.picked_blocks, stats.candidate_blocks);
  }
}

TEST(SparseAttentionTest, ASmallBudgetAttendsToFewerTokens) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 12);
  ModelRunner dense_runner = MakeRunner(model);
  const auto dense = Decode(dense_runner, tokens, 10, 0, std::nullopt);
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    ModelRunner runner = MakeRunner(model, mode);
    const auto sparse = Decode(runner, tokens, 10, 0, Selection(mode, 32));
    const SparseAttentionStats stats = runner.sparse_stats();
    const int32_t layers = TinyConfig().num_layers;
    const int32_t sets = mode == SelectionMode::kSoloHead ? 1 : TinyConfig().num_kv_heads;
    EXPECT_EQ(stats.selections, int64_t{10} * layers * sets);
    // Every selection stays within the 32-token budget: the sink block (4 tokens), the window
    // (the blocks of the last 8 tokens: 2 blocks, or 3 with a partial tail) and 4 or 5 picks.
    EXPECT_LE(stats.attended_tokens, int64_t{10} * layers * 32);
    EXPECT_GE(stats.picked_blocks, stats.selections * 4);
    EXPECT_LE(stats.picked_blocks, stats.selections * 5);
    EXPECT_LT(stats.attended_tokens, stats.context_tokens / 4);
    EXPECT_LE(stats.reused_blocks, stats.picked_blocks);
    EXPECT_GT(stats.reused_blocks, 0);  // consecutive queries of one text pick much the same
    bool differs = false;
    for (size_t i = 0; i < dense.size(); ++i) differs |= sparse[i] != dense[i];
    EXPECT_TRUE(differs) << "32 of ~150 tokens cannot give the dense logits";
  }
}

// Dense layers (OffloadConfig::dense_layers): with every layer dense a small budget gives the dense
// logits bit for bit and selects nothing; with the first of two dense, the other selects and the
// attended tokens count the dense layer's whole context. A runner with a host tier refuses them.
TEST(SparseAttentionTest, DenseLayersAttendToEveryBlock) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 12);
  ModelRunner dense_runner = MakeRunner(model);
  const auto dense = Decode(dense_runner, tokens, 10, 0, std::nullopt);
  const int32_t layers = TinyConfig().num_layers;
  ModelRunner all = MakeRunner(model, SelectionMode::kSoloHead, layers);
  ExpectBitwiseEqual(Decode(all, tokens, 10, 0, Selection(SelectionMode::kSoloHead, 32)), dense);
  EXPECT_EQ(all.sparse_stats().selections, 0);
  EXPECT_EQ(all.sparse_stats().attended_tokens, all.sparse_stats().context_tokens);

  ModelRunner none = MakeRunner(model, SelectionMode::kSoloHead);
  const auto sparse = Decode(none, tokens, 10, 0, Selection(SelectionMode::kSoloHead, 32));
  ModelRunner first = MakeRunner(model, SelectionMode::kSoloHead, 1);
  const auto half = Decode(first, tokens, 10, 0, Selection(SelectionMode::kSoloHead, 32));
  const SparseAttentionStats stats = first.sparse_stats();
  EXPECT_EQ(stats.selections, int64_t{10} * (layers - 1));
  EXPECT_EQ(stats.attended_tokens, none.sparse_stats().attended_tokens * (layers - 1) / layers +
                                       stats.context_tokens / layers);
  EXPECT_NE(half, sparse);
  EXPECT_NE(half, dense);

  const absl::StatusOr<ModelRunner> tiered =
      CreateRunner(model, OffloadConfig{.host_tokens = 160, .slot_tokens = 64, .dense_layers = 1});
  EXPECT_EQ(tiered.status().code(), absl::StatusCode::kUnimplemented) << tiered.status();
}

TEST(SparseAttentionTest, SparseDecodeBesideAPromptChunkLeavesTheChunkDense) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> first = Prompt(120, TinyConfig().vocab_size, 13);
  const std::vector<int32_t> second = Prompt(30, TinyConfig().vocab_size, 14);
  std::vector<int32_t> blocks_a(kBlocksPerSeq);
  std::vector<int32_t> blocks_b(kBlocksPerSeq);
  std::iota(blocks_a.begin(), blocks_a.end(), 0);
  std::iota(blocks_b.begin(), blocks_b.end(), kBlocksPerSeq);
  const int32_t vocab = TinyConfig().vocab_size;
  std::vector<float> none;
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    // The second sequence's prompt alone.
    ModelRunner alone = MakeRunner(model);
    StepBatch batch;
    batch.AddSequence(second, 0, blocks_b, LogitRows::kLast);
    std::vector<float> expected(vocab);
    ASSERT_TRUE(alone.Forward(batch, expected).ok());

    // The same prompt in one step with the first sequence's sparse decode row.
    ModelRunner runner = MakeRunner(model, mode);
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(first).first(119), 0, blocks_a, LogitRows::kNone,
                      Selection(mode, 32));
    ASSERT_TRUE(runner.Forward(batch, none).ok());
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(first).subspan(119, 1), 119, blocks_a,
                      LogitRows::kLast, Selection(mode, 32));
    batch.AddSequence(second, 0, blocks_b, LogitRows::kLast);
    std::vector<float> both(2 * vocab);
    ASSERT_TRUE(runner.Forward(batch, both).ok());
    EXPECT_EQ(std::memcmp(both.data() + vocab, expected.data(), vocab * sizeof(float)), 0);
    EXPECT_EQ(runner.sparse_stats().selections,
              TinyConfig().num_layers *
                  (mode == SelectionMode::kSoloHead ? 1 : TinyConfig().num_kv_heads));
  }
}

}  // namespace
}  // namespace pulse
