// Layer-wise scheduling on the CPU backend, whose copy engine is a thread (recall really lands
// while compute runs) and whose kernels compute a row alike whatever the batch: a decode step
// split into micro-batches gives the tokens of the unsplit step, for any count, with recall on
// time or late, offloaded or dense, and with the adaptive choice, which splits once recall
// takes longer than compute.
#include <memory>
#include <vector>

#include "core/sched/engine.h"
#include "gtest/gtest.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::MakeEngine;
using ::pulse::testing::Prompt;
using ::pulse::testing::RunToIdle;
using ::pulse::testing::SnapshotOf;
using ::pulse::testing::TinyConfig;
using ::pulse::testing::TinyModel;

constexpr int32_t kBlockTokens = 4;
constexpr int32_t kRequests = 5;

// Five requests at once, four offloaded at a budget that selects and one dense (run as it asks),
// so that micro-batches mix both kinds.
EngineOptions Options(SelectionMode mode, int32_t micro_batches) {
  return {.max_batch = kRequests,
          .prefill_chunk = 16,
          .max_step_tokens = 64,
          .block_tokens = kBlockTokens,
          .kv_capacity_tokens = 400,
          .offload = OffloadConfig{.selection = {.mode = mode,
                                                 .budget_tokens = 32,
                                                 .sink_tokens = kBlockTokens,
                                                 .window_tokens = 2 * kBlockTokens},
                                   .host_tokens = kRequests * 160,
                                   .slot_tokens = kRequests * 160,
                                   // Every first pick of a block is recalled: the steps have
                                   // recall to hide.
                                   .fill_free_slots = false},
          .admission = AdmissionKind::kOffloadEvery,
          .micro_batches = micro_batches};
}

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
};

// Sampled with seeds; the last request runs densely.
Outcome Generate(const EngineOptions& options, absl::Duration copy_delay) {
  std::unique_ptr<Engine> engine = MakeEngine(TinyModel(TinyConfig(), 0, 0, copy_delay), options);
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < kRequests; ++i) {
    SamplingParams params = testing::Greedy(20, true);
    params.temperature = 0.9f;
    params.seed = 300 + static_cast<uint64_t>(i);
    RequestOffload offload;
    if (i == kRequests - 1) offload.mode = RequestOffload::Mode::kDense;
    absl::StatusOr<RequestId> id =
        engine->Submit(Prompt(40 + 3 * i, TinyConfig().vocab_size, 70 + static_cast<uint32_t>(i)),
                       params, nullptr, offload);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.value_or(0));
  }
  RunToIdle(*engine);
  Outcome run;
  for (const RequestId id : ids) {
    const RequestSnapshot snapshot = SnapshotOf(*engine, id);
    EXPECT_TRUE(snapshot.error.ok()) << snapshot.error;
    run.tokens.push_back(snapshot.tokens);
  }
  run.stats = engine->stats();
  return run;
}

TEST(EngineMicroBatchTest, AnyMicroBatchCountGivesTheTokensOfOne) {
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(static_cast<int>(mode));
    const Outcome one = Generate(Options(mode, 1), absl::ZeroDuration());
    EXPECT_EQ(one.stats.micro_batches.split_steps, 0);
    EXPECT_GT(one.stats.offload.recall_bytes, 0);
    EXPECT_LT(one.stats.sparse.attended_tokens, one.stats.sparse.context_tokens);
    for (const int32_t count : {2, 3, 4, 5}) {
      SCOPED_TRACE(count);
      const Outcome split = Generate(Options(mode, count), absl::ZeroDuration());
      EXPECT_EQ(split.tokens, one.tokens);
      EXPECT_GT(split.stats.micro_batches.split_steps, 0);
      // The same selections, recalls and cache decisions, step for step.
      EXPECT_EQ(split.stats.offload.recall_bytes, one.stats.offload.recall_bytes);
      EXPECT_EQ(split.stats.offload.cache, one.stats.offload.cache);
      EXPECT_EQ(split.stats.sparse.reused_blocks, one.stats.sparse.reused_blocks);
    }
  }
}

// Each copy plan of the CPU copy engine lands late: a micro-batch's attention then waits for its
// recall while the others compute, and no token changes.
TEST(EngineMicroBatchTest, LateRecallChangesNoTokenOfASplitStep) {
  const Outcome on_time = Generate(Options(SelectionMode::kSoloHead, 1), absl::ZeroDuration());
  for (const int32_t count : {1, 2, 4}) {
    SCOPED_TRACE(count);
    EXPECT_EQ(Generate(Options(SelectionMode::kSoloHead, count), absl::Milliseconds(1)).tokens,
              on_time.tokens);
  }
}

// The adaptive choice: with recall slowed far past compute it splits the offloaded decode steps
// in two, runs every 16th as one to measure compute, and the tokens stay those of one.
TEST(EngineMicroBatchTest, TheAdaptiveChoiceSplitsWhenRecallOutlastsCompute) {
  const Outcome one = Generate(Options(SelectionMode::kSoloHead, 1), absl::ZeroDuration());
  const Outcome adaptive = Generate(Options(SelectionMode::kSoloHead, 0), absl::Milliseconds(3));
  EXPECT_EQ(adaptive.tokens, one.tokens);
  EXPECT_GT(adaptive.stats.micro_batches.split_steps, 0);
  EXPECT_GT(adaptive.stats.admission.link_bytes_per_second, 0.0);
}

// A dense engine's steps split alike when asked to; left to choose, it never splits.
TEST(EngineMicroBatchTest, ADenseEngineSplitsOnlyWhenAsked) {
  EngineOptions options{.max_batch = 4, .block_tokens = kBlockTokens, .kv_capacity_tokens = 400};
  const auto run = [&options](int32_t count) {
    options.micro_batches = count;
    std::unique_ptr<Engine> engine = MakeEngine(TinyModel(), options);
    std::vector<RequestId> ids;
    for (uint32_t i = 0; i < 4; ++i) {
      ids.push_back(
          *engine->Submit(Prompt(30 + 5 * static_cast<int32_t>(i), TinyConfig().vocab_size, 90 + i),
                          testing::Greedy(16, true), nullptr));
    }
    RunToIdle(*engine);
    std::vector<std::vector<int32_t>> tokens;
    for (const RequestId id : ids) tokens.push_back(SnapshotOf(*engine, id).tokens);
    return std::pair{tokens, engine->stats().micro_batches};
  };
  const auto [tokens, adaptive] = run(0);
  EXPECT_EQ(adaptive.split_steps, 0);
  const auto [split_tokens, split] = run(3);
  EXPECT_EQ(split_tokens, tokens);
  EXPECT_GT(split.split_steps, 0);
}

TEST(EngineMicroBatchTest, AMicroBatchCountOutOfRangeIsRefused) {
  for (const int32_t count : {-1, 9}) {
    EXPECT_EQ(Engine::Create(TinyModel(), {.micro_batches = count}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace pulse
