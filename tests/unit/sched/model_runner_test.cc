// ModelRunner on its own: a batch equals its sequences run one by one, and bad batches are
// rejected before any kernel sees them.
#include <cstring>
#include <memory>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/sample/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::Prompt;
using ::pulse::testing::TinyConfig;
using ::pulse::testing::TinyModel;
using ::testing::HasSubstr;

constexpr int32_t kBlockTokens = 4;
constexpr int32_t kBlocks = 32;

ModelRunner MakeRunner(std::shared_ptr<const Model> model, int32_t max_logit_rows = 0) {
  const ModelConfig& config = model->config();
  KvCache cache = *KvCache::Create(model->backend(),
                                   {.block_tokens = kBlockTokens,
                                    .num_kv_heads = config.num_kv_heads,
                                    .head_dim = config.head_dim},
                                   config.num_layers, kBlocks);
  absl::StatusOr<ModelRunner> runner = ModelRunner::Create(std::move(model), std::move(cache),
                                                           {.max_step_tokens = 64,
                                                            .max_seqs = 4,
                                                            .max_blocks_per_seq = 8,
                                                            .max_logit_rows = max_logit_rows});
  EXPECT_TRUE(runner.ok()) << runner.status();
  return *std::move(runner);
}

class ModelRunnerTest : public ::testing::Test {
 protected:
  std::shared_ptr<const Model> model_ = TinyModel();
  ModelRunner runner_ = MakeRunner(model_);
  const size_t vocab_ = static_cast<size_t>(TinyConfig().vocab_size);
};

TEST_F(ModelRunnerTest, ABatchEqualsItsSequencesAloneBitwise) {
  const std::vector<int32_t> a = Prompt(9, TinyConfig().vocab_size, 1);
  const std::vector<int32_t> b = Prompt(5, TinyConfig().vocab_size, 2);
  const std::vector<int32_t> blocks_a = {3, 0, 7};
  const std::vector<int32_t> blocks_b = {12, 5};

  std::vector<float> alone(2 * vocab_);
  StepBatch batch;
  batch.AddSequence(a, 0, blocks_a, LogitRows::kLast);
  ASSERT_TRUE(runner_.Forward(batch, std::span<float>(alone).first(vocab_)).ok());
  batch.Clear();
  batch.AddSequence(b, 0, blocks_b, LogitRows::kLast);
  ASSERT_TRUE(runner_.Forward(batch, std::span<float>(alone).last(vocab_)).ok());

  std::vector<float> together(2 * vocab_);
  batch.Clear();
  batch.AddSequence(a, 0, blocks_a, LogitRows::kLast);
  batch.AddSequence(b, 0, blocks_b, LogitRows::kLast);
  ASSERT_TRUE(runner_.Forward(batch, together).ok());
  EXPECT_EQ(std::memcmp(alone.data(), together.data(), alone.size() * sizeof(float)), 0);
}

TEST_F(ModelRunnerTest, OnlyTheWantedRowsAreReturned) {
  StepBatch batch;
  batch.AddSequence(Prompt(6, TinyConfig().vocab_size, 3), 0, std::vector<int32_t>{1, 2},
                    LogitRows::kNone);
  batch.AddSequence(Prompt(3, TinyConfig().vocab_size, 4), 0, std::vector<int32_t>{4},
                    LogitRows::kLast);
  EXPECT_EQ(batch.num_logit_rows(), 1);
  EXPECT_THAT(batch.logit_rows(), ::testing::ElementsAre(8));
  std::vector<float> logits(vocab_);
  EXPECT_TRUE(runner_.Forward(batch, logits).ok());
  std::vector<float> wrong_size(2 * vocab_);
  EXPECT_EQ(runner_.Forward(batch, wrong_size).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelRunnerTest, AllLogitRowsEqualTheLastRowOfEachPrefixBitwise) {
  constexpr int32_t kTokens = 7;
  ModelRunner runner = MakeRunner(model_, kTokens);
  const std::vector<int32_t> prompt = Prompt(kTokens, TinyConfig().vocab_size, 6);
  const std::vector<int32_t> blocks = {3, 0};
  StepBatch batch;
  batch.AddSequence(prompt, 0, blocks, LogitRows::kAll);
  ASSERT_EQ(batch.num_logit_rows(), kTokens);
  std::vector<float> all(kTokens * vocab_);
  ASSERT_TRUE(runner.Forward(batch, all).ok());
  for (int32_t length = 1; length <= kTokens; ++length) {
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(prompt).first(length), 0, blocks, LogitRows::kLast);
    std::vector<float> last(vocab_);
    ASSERT_TRUE(runner.Forward(batch, last).ok());
    EXPECT_EQ(std::memcmp(last.data(), all.data() + (length - 1) * vocab_, vocab_ * sizeof(float)),
              0)
        << length;
  }
  // The fixture's runner has room for one logit row a sequence (4).
  batch.Clear();
  batch.AddSequence(prompt, 0, blocks, LogitRows::kAll);
  std::vector<float> too_many(kTokens * vocab_);
  EXPECT_EQ(runner_.Forward(batch, too_many).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelRunnerTest, SamplingOnTheBackendDrawsTheHostSamplersTokens) {
  ModelRunner runner = MakeRunner(model_, 4);
  StepBatch batch;
  batch.AddSequence(Prompt(6, TinyConfig().vocab_size, 7), 0, std::vector<int32_t>{1, 2},
                    LogitRows::kAll);
  ASSERT_EQ(batch.num_logit_rows(), 6);  // more than the runner's 4: rejected
  std::vector<int32_t> tokens(6);
  std::vector<TokenSampling> sampling(6);
  EXPECT_EQ(runner.ForwardAndSample(batch, sampling, {}, tokens).code(),
            absl::StatusCode::kInvalidArgument);

  batch.Clear();
  const std::vector<int32_t> prompt = Prompt(4, TinyConfig().vocab_size, 8);
  batch.AddSequence(prompt, 0, std::vector<int32_t>{1}, LogitRows::kAll);
  std::vector<float> logits(4 * vocab_);
  ASSERT_TRUE(runner.Forward(batch, logits).ok());
  const std::vector<SamplingParams> params = {
      {.temperature = 0.0f},
      {.temperature = 0.8f, .top_k = 5, .seed = 3},
      {.temperature = 1.2f, .top_p = 0.7f, .repetition_penalty = 1.5f, .seed = 4},
      {.temperature = 1.0f, .min_p = 0.1f, .seed = 5}};
  std::vector<int32_t> expected;
  std::vector<TokenSampling> rows;
  std::vector<int32_t> penalised_ids;
  for (size_t r = 0; r < params.size(); ++r) {
    const std::span<const int32_t> history(prompt.data(), r + 1);
    Sampler host(params[r]);
    expected.push_back(
        *host.Sample(std::span<const float>(logits).subspan(r * vocab_, vocab_), history));
    Sampler backend(params[r]);
    rows.push_back(backend.Next(history, penalised_ids));
  }
  std::vector<int32_t> drawn(4, -2);
  ASSERT_TRUE(runner.ForwardAndSample(batch, rows, penalised_ids, drawn).ok());
  EXPECT_EQ(drawn, expected);
}

TEST_F(ModelRunnerTest, BadBatchesAreRejected) {
  const auto expect_rejected = [&](const StepBatch& batch, const char* message) {
    std::vector<float> logits(static_cast<size_t>(batch.num_logit_rows()) * vocab_);
    const absl::Status status = runner_.Forward(batch, logits);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(status.message(), HasSubstr(message));
  };
  const std::vector<int32_t> one_block = {0};
  StepBatch batch;
  expect_rejected(batch, "0 sequences");
  batch.AddSequence(std::vector<int32_t>{1, TinyConfig().vocab_size}, 0, one_block,
                    LogitRows::kLast);
  expect_rejected(batch, "token 101");
  batch.Clear();
  batch.AddSequence(Prompt(5, TinyConfig().vocab_size, 5), 0, one_block, LogitRows::kLast);
  expect_rejected(batch, "5 new of 5 tokens in 1 blocks");
  batch.Clear();
  batch.AddSequence(std::vector<int32_t>{1}, 0, std::vector<int32_t>{kBlocks}, LogitRows::kLast);
  expect_rejected(batch, "KV block 32");
  batch.Clear();
  batch.AddSequence(std::vector<int32_t>{1}, 0, std::vector<int32_t>(9, 0), LogitRows::kLast);
  expect_rejected(batch, "9 KV blocks");
  batch.Clear();
  for (int32_t s = 0; s < 5; ++s)
    batch.AddSequence(std::vector<int32_t>{1}, 0, one_block, LogitRows::kLast);
  expect_rejected(batch, "5 sequences");
  batch.Clear();
  batch.AddSequence(std::vector<int32_t>(65, 1), 0, std::vector<int32_t>(8, 0), LogitRows::kLast);
  expect_rejected(batch, "65 tokens");
}

TEST(ModelLoadTest, TiedEmbeddingsHaveNoLmHead) {
  ModelConfig config = TinyConfig();
  config.tie_word_embeddings = true;
  const std::shared_ptr<const Model> tied = TinyModel(config);
  EXPECT_FALSE(tied->weights().lm_head.has_value());
  EXPECT_EQ(tied->weights().output().data, tied->weights().embed.view().data);
  const std::shared_ptr<const Model> untied = TinyModel();
  ASSERT_TRUE(untied->weights().lm_head.has_value());
  EXPECT_EQ(untied->weights().output().data, untied->weights().lm_head->view().data);
  EXPECT_EQ(untied->format(), "random");
  EXPECT_EQ(untied->stored_type(), "random");
  EXPECT_EQ(untied->weight_type(), DType::kF32);
  // q, k and v rows fused: 4 heads + 2 * 2 KV heads of 8 dims.
  EXPECT_EQ(untied->weights().layers[0].qkv.rows, 64);
  EXPECT_EQ(untied->weights().layers[0].gate_up.rows, 2 * TinyConfig().intermediate_size);
}

TEST(ModelRunnerCreateTest, MismatchedCacheAndOptionsAreRejected) {
  std::shared_ptr<const Model> model = TinyModel();
  const ModelConfig& config = model->config();
  KvCache wrong_heads = *KvCache::Create(
      model->backend(), {.block_tokens = 4, .num_kv_heads = 1, .head_dim = config.head_dim},
      config.num_layers, 4);
  EXPECT_EQ(ModelRunner::Create(model, std::move(wrong_heads),
                                {.max_step_tokens = 8, .max_seqs = 2, .max_blocks_per_seq = 2})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  KvCache cache = *KvCache::Create(
      model->backend(),
      {.block_tokens = 4, .num_kv_heads = config.num_kv_heads, .head_dim = config.head_dim},
      config.num_layers, 4);
  EXPECT_EQ(ModelRunner::Create(model, std::move(cache),
                                {.max_step_tokens = 0, .max_seqs = 2, .max_blocks_per_seq = 2})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pulse
