// The engine with offloaded sparse attention, on the CPU backend: requests longer than the KV
// cache run (only prompts and resident sets need it), a covering budget generates the dense
// tokens, capacities are admitted and refused with statuses that name them, and cancelling one
// offloaded request leaves the others' tokens alone.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/backend/block_estimator.h"
#include "core/sched/engine.h"
#include "gmock/gmock.h"
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

// Greedy past end of sequence: every request generates all its tokens.
SamplingParams Greedy(int32_t max_tokens) { return testing::Greedy(max_tokens, true); }

EngineOptions Offloaded(SelectionMode mode, int32_t budget, int64_t kv_tokens) {
  return {.max_batch = 4,
          .prefill_chunk = 16,
          .max_step_tokens = 64,
          .block_tokens = kBlockTokens,
          .kv_capacity_tokens = kv_tokens,
          .offload = OffloadConfig{.selection = {.mode = mode,
                                                 .budget_tokens = budget,
                                                 .sink_tokens = kBlockTokens,
                                                 .window_tokens = 2 * kBlockTokens},
                                   .host_tokens = 4 * 160,
                                   .slot_tokens = 4 * 160},
          .admission = AdmissionKind::kOffloadEvery};
}

// Runs `prompts` to completion with `max_tokens` each; returns their tokens.
std::vector<std::vector<int32_t>> Generate(Engine& engine,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           int32_t max_tokens) {
  std::vector<RequestId> ids;
  for (const std::vector<int32_t>& prompt : prompts) {
    absl::StatusOr<RequestId> id = engine.Submit(prompt, Greedy(max_tokens), nullptr);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.value_or(0));
  }
  RunToIdle(engine);
  std::vector<std::vector<int32_t>> tokens;
  for (const RequestId id : ids) {
    const RequestSnapshot snapshot = SnapshotOf(engine, id);
    EXPECT_TRUE(snapshot.error.ok()) << snapshot.error;
    tokens.push_back(snapshot.tokens);
  }
  return tokens;
}

// Steps the engine until nothing is pending; returns the most requests that ran at once.
int32_t StepToIdle(Engine& engine) {
  int32_t most_running = 0;
  for (int32_t step = 0; engine.pending() > 0; ++step) {
    EXPECT_LT(step, 1000);
    if (step >= 1000) break;
    const absl::StatusOr<StepReport> report = engine.Step();
    EXPECT_TRUE(report.ok()) << report.status();
    most_running = std::max(most_running, engine.stats().running);
  }
  return most_running;
}

std::vector<std::vector<int32_t>> Prompts(int32_t count, int32_t length, uint32_t seed) {
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < count; ++i) {
    prompts.push_back(Prompt(length + 3 * i, TinyConfig().vocab_size, seed + i));
  }
  return prompts;
}

TEST(EngineOffloadTest, RequestsLongerThanTheKvCacheRunAndACoveringBudgetGivesTheDenseTokens) {
  std::shared_ptr<const Model> model = TinyModel();
  const auto prompts = Prompts(4, 40, 31);  // 40..49 prompt tokens, + 60 generated
  std::unique_ptr<Engine> dense = MakeEngine(model, {.max_batch = 4,
                                                     .prefill_chunk = 16,
                                                     .max_step_tokens = 64,
                                                     .block_tokens = kBlockTokens,
                                                     .kv_capacity_tokens = 4 * 160});
  const auto expected = Generate(*dense, prompts, 60);

  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(static_cast<int>(mode));
    // 96 tokens of KV cache: no request's 100-odd tokens fit, but its prompt does (or, while
    // the others hold the cache, is prefilled staged).
    std::unique_ptr<Engine> engine = MakeEngine(model, Offloaded(mode, 160, 96));
    std::unique_ptr<Engine> dense_small =
        MakeEngine(model, {.block_tokens = kBlockTokens, .kv_capacity_tokens = 96});
    EXPECT_EQ(dense_small->Submit(prompts[0], Greedy(60), nullptr).status().code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(Generate(*engine, prompts, 60), expected);

    const EngineStats stats = engine->stats();
    EXPECT_EQ(stats.kv_blocks, 24);
    EXPECT_EQ(stats.kv_blocks_in_use, 0);
    EXPECT_EQ(stats.host_blocks_in_use, 0);
    EXPECT_EQ(stats.slot_blocks_in_use, 0);
    // Every full block of every request filled once a layer (the KV of all but the last
    // generated token, (prompt + 59) / 4 blocks): by a staged prompt chunk, or by a step that
    // writes it back.
    int64_t full_blocks = 0;
    for (const auto& prompt : prompts) full_blocks += (prompt.size() + 59) / kBlockTokens;
    EXPECT_EQ(stats.offload.writeback_blocks + stats.offload.staged.filled_blocks,
              full_blocks * TinyConfig().num_layers);
    EXPECT_GT(stats.admission.staged, 0);
    EXPECT_GT(stats.offload.recall_bytes, 0);
    EXPECT_GT(stats.offload.cache.hits, stats.offload.cache.misses);
    EXPECT_EQ(stats.sparse.attended_tokens, stats.sparse.context_tokens);
  }
}

// The blocks an offloaded request's resident set gives up (its prompt's, then each that leaves
// the window) fill the device tier's free slots: picks of them are hits rather than recalls,
// and the tokens are those of the engine that recalls them.
TEST(EngineOffloadTest, GivenUpBlocksFillFreeSlotsAndChangeNoToken) {
  const auto run = [](bool fill) {
    EngineOptions options = Offloaded(SelectionMode::kSoloHead, 32, 96);
    options.offload->fill_free_slots = fill;
    std::unique_ptr<Engine> engine = MakeEngine(TinyModel(), options);
    const auto tokens = Generate(*engine, Prompts(3, 40, 71), 24);
    return std::pair{tokens, engine->stats().offload};
  };
  const auto [filled, filled_stats] = run(true);
  const auto [recalled, recalled_stats] = run(false);
  EXPECT_EQ(filled, recalled);
  EXPECT_GT(recalled_stats.cache.misses, 0);
  EXPECT_LT(4 * filled_stats.cache.misses, recalled_stats.cache.misses);
  EXPECT_LT(4 * filled_stats.recall_bytes, recalled_stats.recall_bytes);
  EXPECT_EQ(filled_stats.cache.hits + filled_stats.cache.misses,
            recalled_stats.cache.hits + recalled_stats.cache.misses);
}

// Prompts longer than the KV cache are prefilled staged: the cache holds their sinks and windows
// only, a staged prompt's chunks (ending inside blocks here) run in steps between the decode steps
// of the request admitted before it, and with a budget covering the context the tokens are the
// dense engine's, also when every copy lands late.
TEST(EngineOffloadTest, PromptsLongerThanTheKvCacheArePrefilledStagedAndGiveTheDenseTokens) {
  std::shared_ptr<const Model> model = TinyModel();
  const auto prompts = Prompts(2, 70, 61);  // 70 and 73 prompt tokens, + 30 generated
  const auto expected = Generate(*MakeEngine(model, {.max_batch = 2,
                                                     .prefill_chunk = 10,
                                                     .block_tokens = kBlockTokens,
                                                     .kv_capacity_tokens = 4 * 160}),
                                 prompts, 30);
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    for (const absl::Duration delay : {absl::ZeroDuration(), absl::Milliseconds(1)}) {
      SCOPED_TRACE(absl::StrCat(static_cast<int>(mode), " ", absl::FormatDuration(delay)));
      // 40 tokens (10 blocks) of KV cache: a decoding request holds 5 of them.
      EngineOptions options = Offloaded(mode, 160, 40);
      options.max_batch = 2;
      options.prefill_chunk = 10;
      std::unique_ptr<Engine> engine = MakeEngine(TinyModel(TinyConfig(), 0, 0, delay), options);
      std::vector<RequestId> ids;
      for (const auto& prompt : prompts) {
        ids.push_back(*engine->Submit(prompt, Greedy(30), nullptr));
      }
      const int32_t most_running = StepToIdle(*engine);
      std::vector<std::vector<int32_t>> tokens;
      for (const RequestId id : ids) tokens.push_back(SnapshotOf(*engine, id).tokens);
      EXPECT_EQ(tokens, expected);
      EXPECT_EQ(most_running, 2);
      const EngineStats stats = engine->stats();
      EXPECT_EQ(stats.admission.staged, 2);
      EXPECT_EQ(stats.offload.staged.chunks, 7 + 8);
      EXPECT_GT(stats.offload.staged.recall_bytes, 0);
      EXPECT_EQ(stats.kv_blocks_in_use, 0);
      EXPECT_EQ(stats.host_blocks_in_use, 0);
      EXPECT_EQ(stats.sparse.attended_tokens, stats.sparse.context_tokens);
    }
  }
}

// A prompt that the KV cache will hold once the prompt being prefilled is in (its request then
// keeps only its resident set) waits for it and is prefilled resident; one that it will not hold
// even then is prefilled staged. Either way the tokens are the dense engine's.
TEST(EngineOffloadTest, APromptWaitsForRoomThatIsComingAndIsStagedOtherwise) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<std::vector<int32_t>> prompts = {Prompt(36, TinyConfig().vocab_size, 81),
                                                     Prompt(36, TinyConfig().vocab_size, 82)};
  const auto expected =
      Generate(*MakeEngine(model, {.block_tokens = kBlockTokens, .kv_capacity_tokens = 4 * 160}),
               prompts, 12);
  // A prompt is 9 blocks, a resident set 5: 14 blocks hold one of each, 13 do not.
  for (const auto& [kv_tokens, staged] : {std::pair{56, 0}, std::pair{52, 1}}) {
    SCOPED_TRACE(kv_tokens);
    std::unique_ptr<Engine> engine =
        MakeEngine(model, Offloaded(SelectionMode::kSoloHead, 160, kv_tokens));
    EXPECT_EQ(Generate(*engine, prompts, 12), expected);
    EXPECT_EQ(engine->stats().admission.staged, staged);
  }
}

// Recall that lands late (each copy plan of the CPU copy engine delayed) changes no token: the
// step waits for what it attends to, whatever the timing. Sampled with seeds, at a budget that
// selects, four requests at once.
TEST(EngineOffloadTest, RecallThatLandsLateChangesNoToken) {
  const auto run = [](absl::Duration delay) {
    std::unique_ptr<Engine> engine = MakeEngine(TinyModel(TinyConfig(), 0, 0, delay),
                                                Offloaded(SelectionMode::kSoloHead, 32, 96));
    std::vector<RequestId> ids;
    const auto prompts = Prompts(4, 40, 51);
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams params = Greedy(24);
      params.temperature = 0.9f;
      params.seed = 100 + i;
      ids.push_back(*engine->Submit(prompts[i], params, nullptr));
    }
    RunToIdle(*engine);
    std::vector<std::vector<int32_t>> tokens;
    for (const RequestId id : ids) tokens.push_back(SnapshotOf(*engine, id).tokens);
    EXPECT_GT(engine->stats().offload.recall_bytes, 0);
    EXPECT_LT(engine->stats().sparse.attended_tokens, engine->stats().sparse.context_tokens);
    return tokens;
  };
  const auto on_time = run(absl::ZeroDuration());
  EXPECT_EQ(run(absl::Milliseconds(2)), on_time);
}

TEST(EngineOffloadTest, ASmallBudgetAttendsToLessAndDecodesMoreContextThanTheKvCacheHolds) {
  std::shared_ptr<const Model> model = TinyModel();
  std::unique_ptr<Engine> engine = MakeEngine(model, Offloaded(SelectionMode::kSoloHead, 32, 96));
  std::vector<RequestId> ids;
  for (const auto& prompt : Prompts(4, 40, 41)) {
    ids.push_back(*engine->Submit(prompt, Greedy(60), nullptr));
  }
  // 4 requests of 100-odd tokens against 96 tokens (24 blocks) of KV cache. A decoding request
  // holds 5 resident blocks, a prefilling one its whole prompt (10 to 13 blocks), or 5 when the
  // cache cannot hold its prompt and it is prefilled staged: all four run at once, over four
  // times the context the cache holds.
  const int32_t most_running = StepToIdle(*engine);
  EXPECT_EQ(most_running, 4);
  for (const RequestId id : ids) EXPECT_EQ(SnapshotOf(*engine, id).tokens.size(), 60u);
  const EngineStats stats = engine->stats();
  EXPECT_GT(stats.admission.staged, 0);
  EXPECT_LT(stats.sparse.attended_tokens, stats.sparse.context_tokens / 2);
  EXPECT_GT(stats.offload.cache.misses, 0);
  EXPECT_GT(stats.sparse.reused_blocks, 0);
}

// Sizes near INT64_MAX are refused by name, not overflowed into a cache of some other size.
TEST(EngineOffloadTest, KvSizesNearTheLimitOfInt64AreRefused) {
  for (const int64_t tokens : {std::numeric_limits<int64_t>::max(),
                               std::numeric_limits<int64_t>::max() - 1, int64_t{1} << 40}) {
    const absl::Status status =
        Engine::Create(TinyModel(), {.block_tokens = kBlockTokens, .kv_capacity_tokens = tokens})
            .status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << tokens;
    EXPECT_THAT(status.message(), ::testing::HasSubstr("too many blocks")) << status;
  }
}

// A host tier of a billion tokens on a backend with 4 MiB: the engine is refused by the backend's
// memory, before any host copy of per-block state that size is made (its summaries' pick stamps
// were staged on the host whole, gigabytes, before the backend was asked).
TEST(EngineOffloadTest, AHugeHostTierIsRefusedByTheBackendsMemory) {
  EngineOptions options = Offloaded(SelectionMode::kSoloHead, 32, 96);
  options.offload->host_tokens = int64_t{1} << 30;
  const absl::Status status =
      Engine::Create(TinyModel(TinyConfig(), /*memory_limit=*/4 << 20), options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
}

TEST(EngineOffloadTest, CapacitiesARequestCanNeverFitAreRefusedAtSubmitByName) {
  std::shared_ptr<const Model> model = TinyModel();
  EngineOptions options = Offloaded(SelectionMode::kSoloHead, 64, 32);
  options.offload->host_tokens = 80;
  options.offload->slot_tokens = 32;
  std::unique_ptr<Engine> engine = MakeEngine(model, options);
  const auto status = [&](int32_t prompt, int32_t max_tokens) {
    return engine->Submit(Prompt(prompt, TinyConfig().vocab_size, 1), Greedy(max_tokens), nullptr)
        .status();
  };
  // A prompt longer than the KV cache (32 tokens) is prefilled staged.
  const absl::StatusOr<RequestId> staged =
      engine->Submit(Prompt(33, TinyConfig().vocab_size, 1), Greedy(1), nullptr);
  ASSERT_TRUE(staged.ok()) << staged.status();
  // Its sinks and window must fit it: with a window of 40 tokens they take 9 blocks of 4 here.
  EngineOptions wide = options;
  wide.offload->selection.window_tokens = 40;
  EXPECT_THAT(MakeEngine(model, wide)
                  ->Submit(Prompt(33, TinyConfig().vocab_size, 1), Greedy(1), nullptr)
                  .status()
                  .message(),
              ::testing::HasSubstr("resident at once"));
  ASSERT_TRUE(engine->Cancel(*staged).ok());
  // The whole request must fit the host tier (80 tokens).
  EXPECT_THAT(status(20, 70).message(), ::testing::HasSubstr("host tier"));
  // A budget of 64 tokens picks up to 16 blocks of 4 a step; the device tier has 8 slots.
  EXPECT_THAT(status(20, 20).message(), ::testing::HasSubstr("slots"));
  EXPECT_EQ(engine->pending(), 0);
}

TEST(EngineOffloadTest, SlotsAdmitOneRequestAtATimeWhenTheyHoldOneBudget) {
  std::shared_ptr<const Model> model = TinyModel();
  EngineOptions options = Offloaded(SelectionMode::kHeadWise, 32, 96);
  options.offload->slot_tokens = 32;  // one budget's 8 blocks
  std::unique_ptr<Engine> engine = MakeEngine(model, options);
  std::vector<RequestId> ids;
  for (const auto& prompt : Prompts(3, 30, 51)) {
    ids.push_back(*engine->Submit(prompt, Greedy(20), nullptr));
  }
  for (int32_t step = 0; engine->pending() > 0; ++step) {
    ASSERT_LT(step, 1000);
    ASSERT_TRUE(engine->Step().ok());
    EXPECT_LE(engine->stats().running, 1);
    EXPECT_LE(engine->stats().slot_blocks_in_use, 8);
  }
  for (const RequestId id : ids) EXPECT_EQ(SnapshotOf(*engine, id).tokens.size(), 20u);
}

// The host tier is pinned as requests are admitted, in chunks: a request whose blocks the backend
// cannot pin waits while others run, and fails with a capacity status when nothing running could
// make room; the others' tokens do not change, and the engine goes on serving what fits.
TEST(EngineOffloadTest, AHostTierThatCannotBePinnedIsACapacityStatusForThatRequestAlone) {
  // A block of every layer: 2 layers x 2 KV heads x 4 tokens x 8 dims x K and V x 4 bytes.
  const size_t layered_block = 2 * 2 * 2 * kBlockTokens * 8 * 4;
  const size_t chunk = 8 * layered_block;  // 8 blocks, 32 tokens
  std::shared_ptr<const Model> model = TinyModel(TinyConfig(), 0, /*host_memory_limit=*/2 * chunk);
  EngineOptions options = Offloaded(SelectionMode::kSoloHead, 24, 160);
  options.offload->host_chunk_bytes = static_cast<int64_t>(chunk);
  const auto small = Prompt(20, TinyConfig().vocab_size, 81);  // 39 tokens of KV: 10 blocks
  const auto large = Prompt(60, TinyConfig().vocab_size, 82);  // 79: 20 blocks, 3 chunks
  std::unique_ptr<Engine> alone = MakeEngine(TinyModel(), options);
  const auto expected = Generate(*alone, {small}, 20);

  std::unique_ptr<Engine> engine = MakeEngine(model, options);
  const RequestId first = *engine->Submit(small, Greedy(20), nullptr);
  const RequestId second = *engine->Submit(large, Greedy(20), nullptr);
  RunToIdle(*engine);
  EXPECT_EQ(SnapshotOf(*engine, first).tokens, expected[0]);
  const RequestSnapshot refused = SnapshotOf(*engine, second);
  EXPECT_EQ(refused.reason, FinishReason::kError);
  EXPECT_EQ(refused.error.code(), absl::StatusCode::kResourceExhausted) << refused.error;
  EXPECT_THAT(refused.error.message(), ::testing::HasSubstr("host tier"));
  EXPECT_TRUE(refused.tokens.empty());
  // What fits the pinned chunks still runs.
  EXPECT_EQ(Generate(*engine, {small}, 20), expected);
  EXPECT_EQ(engine->stats().host_blocks_in_use, 0);
}

TEST(EngineOffloadTest, CancellingAnOffloadedRequestLeavesTheOthersTokensAlone) {
  std::shared_ptr<const Model> model = TinyModel();
  const auto prompts = Prompts(3, 40, 61);
  std::unique_ptr<Engine> alone = MakeEngine(model, Offloaded(SelectionMode::kSoloHead, 48, 96));
  const auto expected = Generate(*alone, {prompts[0], prompts[2]}, 40);

  std::unique_ptr<Engine> engine = MakeEngine(model, Offloaded(SelectionMode::kSoloHead, 48, 96));
  std::vector<RequestId> ids;
  for (const auto& prompt : prompts) ids.push_back(*engine->Submit(prompt, Greedy(40), nullptr));
  for (int32_t step = 0; step < 12; ++step) ASSERT_TRUE(engine->Step().ok());
  ASSERT_TRUE(engine->Cancel(ids[1]).ok());
  RunToIdle(*engine);
  EXPECT_EQ(SnapshotOf(*engine, ids[1]).reason, FinishReason::kCancelled);
  EXPECT_EQ(SnapshotOf(*engine, ids[0]).tokens, expected[0]);
  EXPECT_EQ(SnapshotOf(*engine, ids[2]).tokens, expected[1]);
  EXPECT_EQ(engine->stats().host_blocks_in_use, 0);
  EXPECT_EQ(engine->stats().kv_blocks_in_use, 0);
}

TEST(EngineOffloadTest, ARequestMayRunDenselyOrWithItsOwnSelection) {
  std::shared_ptr<const Model> model = TinyModel();
  const auto prompts = Prompts(2, 40, 71);
  std::unique_ptr<Engine> dense = MakeEngine(model, {.max_batch = 4,
                                                     .prefill_chunk = 16,
                                                     .max_step_tokens = 64,
                                                     .block_tokens = kBlockTokens,
                                                     .kv_capacity_tokens = 4 * 160});
  const auto expected = Generate(*dense, prompts, 30);

  // Dense requests in an offloading engine: the engine's tokens, and no selection.
  std::unique_ptr<Engine> engine =
      MakeEngine(model, Offloaded(SelectionMode::kSoloHead, 32, 4 * 160));
  std::vector<RequestId> ids;
  for (const auto& prompt : prompts) {
    ids.push_back(
        *engine->Submit(prompt, Greedy(30), nullptr, {.mode = RequestOffload::Mode::kDense}));
  }
  RunToIdle(*engine);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(SnapshotOf(*engine, ids[i]).tokens, expected[i]);
  }
  EXPECT_EQ(engine->stats().sparse.selections, 0);
  EXPECT_EQ(engine->stats().host_blocks_in_use, 0);

  // A budget covering the context, asked by the request of an engine whose own budget is 32.
  ids.clear();
  for (const auto& prompt : prompts) {
    ids.push_back(*engine->Submit(prompt, Greedy(30), nullptr, {.budget_tokens = 160}));
  }
  RunToIdle(*engine);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(SnapshotOf(*engine, ids[i]).tokens, expected[i]);
  }
  EXPECT_EQ(engine->stats().sparse.attended_tokens, engine->stats().sparse.context_tokens);

  const auto submit = [&](Engine& target, const RequestOffload& offload) {
    return target.Submit(prompts[0], Greedy(4), nullptr, offload).status();
  };
  EXPECT_EQ(submit(*engine, {.mode = RequestOffload::Mode::kHeadWise}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(submit(*engine, {.mode = RequestOffload::Mode::kSoloHead}).ok());
  EXPECT_EQ(submit(*engine, {.sink_tokens = -1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(submit(*dense, {.budget_tokens = 64}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(submit(*dense, {.mode = RequestOffload::Mode::kDense}).ok());
}

// With offload every KV block keeps its summary on the device, so the default KV cache (a share
// of the backend's free memory) is sized with the summaries' bytes: an estimator with bigger
// summaries gets fewer KV tokens, and both engines fit.
TEST(EngineOffloadTest, TheDefaultKvCacheLeavesRoomForTheHostTiersSummaries) {
  // A context long enough that the memory, not 8 contexts, bounds the default.
  ModelConfig config = TinyConfig();
  config.max_position = 4096;
  std::shared_ptr<const Model> capped = TinyModel(config, /*memory_limit=*/4 << 20);
  int64_t kv_tokens[2] = {};
  for (int i = 0; i < 2; ++i) {
    EngineOptions options = Offloaded(SelectionMode::kSoloHead, 32, 0);
    options.offload->estimator = *ParseEstimator(i == 0 ? "box-r0" : "tokens-r0");
    std::unique_ptr<Engine> engine = MakeEngine(capped, options);
    ASSERT_NE(engine, nullptr);
    kv_tokens[i] = engine->options().kv_capacity_tokens;
  }
  // TinyConfig: a token's keys and values are 2 heads x 8 dims x 2 x 4 bytes = 128 bytes a layer
  // (256 in its 2 layers); its fp32 summary 2 x 8 x 4 / 4 = 16 bytes a layer as one box of 4
  // tokens, 64 as 4. The 640 host-tier tokens' summaries come first, and the KV cache gets 70%
  // of what is left, its blocks keeping no summary: the second engine's summaries take 640 x 48 x
  // 2 bytes more, 0.7 x 61440 / 256 = 168 tokens of KV cache fewer.
  EXPECT_NEAR(static_cast<double>(kv_tokens[0] - kv_tokens[1]), 168.0, 2.0);
}

// A cap on the KV's device memory: the dense engine's KV cache takes all of it; an offloading
// engine's slots and host-tier summaries come first and its KV cache gets the rest; the engine
// reports what it uses, never more than the cap. Too small a cap, or a cap with a set KV cache
// size, is refused by name.
TEST(EngineOffloadTest, AKvMemoryCapSizesTheCacheAfterTheOffloadTiers) {
  std::shared_ptr<const Model> model = TinyModel();
  // TinyConfig: 2 layers of 128 bytes of fp32 KV a token (256 in all); int4 summaries of every
  // key, 2 heads x (4 + 4) bytes a token and layer (32 in all).
  constexpr int64_t kCap = 256 * 1000;
  std::unique_ptr<Engine> dense =
      MakeEngine(model, {.block_tokens = kBlockTokens, .kv_memory_bytes = kCap});
  EXPECT_EQ(dense->options().kv_capacity_tokens, 1000);
  EXPECT_EQ(dense->stats().kv_memory_bytes, kCap);

  constexpr int64_t kOffloadedCap = 276480;
  EngineOptions options = Offloaded(SelectionMode::kSoloHead, 32, 0);
  options.kv_memory_bytes = kOffloadedCap;
  std::unique_ptr<Engine> offloaded = MakeEngine(model, options);
  ASSERT_NE(offloaded, nullptr);
  // 640 slot tokens (163840 bytes), 640 host tokens' summaries (20480 bytes) and the staging
  // area of staged prompts (two layers of 84 blocks of 512 bytes, 86016 bytes: a 255-token
  // context's 64 blocks, a 64-token step's 16 and a partial block for each of 4 sequences)
  // first; the rest, 6144 bytes, holds 24 tokens of KV cache (256 bytes a token, whole blocks
  // of 4: the dense pool's blocks keep no summaries).
  EXPECT_EQ(offloaded->options().kv_capacity_tokens, 24);
  const int64_t used = offloaded->stats().kv_memory_bytes;
  EXPECT_LE(used, kOffloadedCap);
  EXPECT_GT(used, kOffloadedCap - 256 * kBlockTokens);

  options.kv_memory_bytes = 256 * 640;  // the slots alone
  EXPECT_EQ(Engine::Create(model, options).status().code(), absl::StatusCode::kResourceExhausted);
  options.kv_capacity_tokens = 64;
  EXPECT_EQ(Engine::Create(model, options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pulse
