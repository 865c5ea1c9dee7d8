// How an offloading engine places its requests (EngineOptions::admission), on the CPU backend:
// at a load that fits the KV cache nothing is offloaded, under memory pressure the requests that
// do not fit are, a request that asks for its own budget is offloaded whatever the load, and with
// a budget covering the context the tokens are the dense ones whatever the placement.
#include <memory>
#include <vector>

#include "core/sched/engine.h"
#include "gtest/gtest.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::Greedy;
using ::pulse::testing::MakeEngine;
using ::pulse::testing::Prompt;
using ::pulse::testing::RunToIdle;
using ::pulse::testing::SnapshotOf;
using ::pulse::testing::TinyConfig;
using ::pulse::testing::TinyModel;

constexpr int32_t kBlockTokens = 4;
constexpr int32_t kMaxTokens = 60;

// 4 prompts of 40 to 49 tokens: with 60 generated, 25 to 27 blocks of KV each.
std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 4; ++i)
    prompts.push_back(Prompt(40 + 3 * i, TinyConfig().vocab_size, 7 + i));
  return prompts;
}

EngineOptions Options(int64_t kv_tokens, std::optional<AdmissionKind> admission) {
  EngineOptions options{.max_batch = 4,
                        .prefill_chunk = 16,
                        .max_step_tokens = 64,
                        .block_tokens = kBlockTokens,
                        .kv_capacity_tokens = kv_tokens};
  if (admission) {
    // A budget covering every context: offloaded requests attend to every block.
    options.offload = OffloadConfig{.selection = {.budget_tokens = 160,
                                                  .sink_tokens = kBlockTokens,
                                                  .window_tokens = 2 * kBlockTokens},
                                    .host_tokens = 4 * 160,
                                    .slot_tokens = 4 * 160,
                                    // Offloaded steps recall, and admission measures it.
                                    .fill_free_slots = false};
    options.admission = *admission;
  }
  return options;
}

std::vector<std::vector<int32_t>> Generate(Engine& engine, const RequestOffload& offload = {}) {
  std::vector<RequestId> ids;
  for (const std::vector<int32_t>& prompt : Prompts()) {
    absl::StatusOr<RequestId> id =
        engine.Submit(prompt, Greedy(kMaxTokens, /*ignore_eos=*/true), nullptr, offload);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.value_or(0));
  }
  RunToIdle(engine);
  std::vector<std::vector<int32_t>> tokens;
  for (const RequestId id : ids) {
    const RequestSnapshot snapshot = SnapshotOf(engine, id);
    EXPECT_TRUE(snapshot.error.ok()) << snapshot.error;
    EXPECT_EQ(snapshot.tokens.size(), static_cast<size_t>(kMaxTokens));
    tokens.push_back(snapshot.tokens);
  }
  return tokens;
}

// The link is calibrated when an offloading engine is made (one timed copy), so its rate shows
// before any step; the recalls' measured rates replace it.
TEST(EngineAdmissionTest, TheLinkIsCalibratedAtStart) {
  std::shared_ptr<const Model> model = TinyModel();
  EXPECT_EQ(MakeEngine(model, Options(160, std::nullopt))->stats().admission.link_bytes_per_second,
            0.0);
  std::unique_ptr<Engine> engine = MakeEngine(model, Options(160, AdmissionKind::kIoAdaptive));
  const EngineStats::Admission calibrated = engine->stats().admission;
  EXPECT_GT(calibrated.link_bytes_per_second, 0.0);
  // Nothing predicted from it alone: no recall a row is known yet.
  EXPECT_EQ(calibrated.recall_bytes_per_row, 0.0);
  EXPECT_EQ(calibrated.predicted_recall_ms, 0.0);
}

TEST(EngineAdmissionTest, AtALoadThatFitsTheKvCacheNothingIsOffloaded) {
  std::shared_ptr<const Model> model = TinyModel();
  const auto expected = Generate(*MakeEngine(model, Options(4 * 160, std::nullopt)));
  std::unique_ptr<Engine> engine = MakeEngine(model, Options(4 * 160, AdmissionKind::kIoAdaptive));
  EXPECT_EQ(Generate(*engine), expected);
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.admission.resident, 4);
  EXPECT_EQ(stats.admission.offloaded, 0);
  EXPECT_EQ(stats.admission.offloaded_running, 0);
  EXPECT_EQ(stats.sparse.selections, 0);
  EXPECT_EQ(stats.offload.writeback_blocks, 0);
  EXPECT_EQ(stats.offload.recall_bytes, 0);
  EXPECT_EQ(stats.kv_blocks_in_use, 0);
}

TEST(EngineAdmissionTest, UnderMemoryPressureTheRequestsThatDoNotFitAreOffloaded) {
  std::shared_ptr<const Model> model = TinyModel();
  const auto expected = Generate(*MakeEngine(model, Options(4 * 160, std::nullopt)));
  // 40 blocks: the first request's 25 and room for an offloaded one's resident set, so the next
  // ones are offloaded; once the resident one finishes, a later one may fit resident again. How
  // many of each depends on the measured rates (a request may wait for recall), the tokens do not.
  std::unique_ptr<Engine> engine = MakeEngine(model, Options(160, AdmissionKind::kIoAdaptive));
  EXPECT_EQ(Generate(*engine), expected);
  const EngineStats stats = engine->stats();
  EXPECT_GE(stats.admission.resident, 1);
  EXPECT_GE(stats.admission.offloaded, 1);
  EXPECT_EQ(stats.admission.resident + stats.admission.offloaded, 4);
  EXPECT_EQ(stats.admission.offloaded_running, 0);
  EXPECT_GT(stats.sparse.selections, 0);
  EXPECT_GT(stats.offload.recall_bytes, 0);
  // Offloaded decode steps were measured.
  EXPECT_GT(stats.admission.link_bytes_per_second, 0.0);
  EXPECT_GT(stats.admission.recall_bytes_per_row, 0.0);
  EXPECT_EQ(stats.host_blocks_in_use, 0);
  EXPECT_EQ(stats.slot_blocks_in_use, 0);
  EXPECT_EQ(stats.kv_blocks_in_use, 0);

  // Offloading every request gives the same tokens.
  std::unique_ptr<Engine> every = MakeEngine(model, Options(160, AdmissionKind::kOffloadEvery));
  EXPECT_EQ(Generate(*every), expected);
  EXPECT_EQ(every->stats().admission.resident, 0);
  EXPECT_EQ(every->stats().admission.offloaded, 4);
}

TEST(EngineAdmissionTest, ARequestWithItsOwnBudgetOrModeRunsAsItAsks) {
  std::shared_ptr<const Model> model = TinyModel();
  std::unique_ptr<Engine> engine = MakeEngine(model, Options(4 * 160, AdmissionKind::kIoAdaptive));
  Generate(*engine, RequestOffload{.budget_tokens = 32});
  EXPECT_EQ(engine->stats().admission.offloaded, 4);
  EXPECT_EQ(engine->stats().admission.resident, 0);
  EXPECT_GT(engine->stats().sparse.selections, 0);
  Generate(*engine, RequestOffload{.mode = RequestOffload::Mode::kDense});
  EXPECT_EQ(engine->stats().admission.resident, 4);
  EXPECT_EQ(engine->stats().admission.offloaded, 4);
}

// Placement changes while requests run, with a budget covering every context so that the tokens
// are the dense ones wherever a request's KV lives. A (a short prompt, a long generation) runs
// resident; B and C arrive while it decodes: B is offloaded into the room left, C's prompt does
// not fit, so A is demoted (its sinks and window stay, the rest goes to the host tier), which
// leaves room for C resident. Once B decodes, its prompt's blocks free up, nothing waits, and an
// offloaded request is promoted back: its blocks are recalled and it attends densely again.
TEST(EngineAdmissionTest, ARunningRequestIsDemotedUnderPressureAndPromotedWhenMemoryFrees) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> a = Prompt(20, TinyConfig().vocab_size, 61);
  const std::vector<int32_t> b = Prompt(40, TinyConfig().vocab_size, 62);
  const std::vector<int32_t> c = Prompt(40, TinyConfig().vocab_size, 63);
  const auto generate = [&](Engine& engine, bool staged) {
    const RequestId first = *engine.Submit(a, Greedy(120, true), nullptr);
    while (staged && SnapshotOf(engine, first).tokens.size() < 2) {
      EXPECT_TRUE(engine.Step().ok());
    }
    const RequestId second = *engine.Submit(b, Greedy(8, true), nullptr);
    const RequestId third = *engine.Submit(c, Greedy(8, true), nullptr);
    RunToIdle(engine);
    std::vector<std::vector<int32_t>> tokens;
    for (const RequestId id : {first, second, third}) {
      const RequestSnapshot snapshot = SnapshotOf(engine, id);
      EXPECT_TRUE(snapshot.error.ok()) << snapshot.error;
      tokens.push_back(snapshot.tokens);
    }
    return tokens;
  };
  const auto expected = generate(*MakeEngine(model, Options(4 * 160, std::nullopt)), false);
  // 50 blocks: A's worst case is 35 (139 tokens), B's and C's prompts 10 each.
  std::unique_ptr<Engine> engine = MakeEngine(model, Options(200, AdmissionKind::kIoAdaptive));
  EXPECT_EQ(generate(*engine, true), expected);
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.admission.resident, 2);
  EXPECT_EQ(stats.admission.offloaded, 1);
  EXPECT_EQ(stats.admission.demoted, 1);
  EXPECT_GE(stats.admission.promoted, 1);
  EXPECT_EQ(stats.admission.offloaded_running, 0);
  EXPECT_EQ(stats.kv_blocks_in_use, 0);
  EXPECT_EQ(stats.host_blocks_in_use, 0);
  EXPECT_EQ(stats.slot_blocks_in_use, 0);

  // The same with late recall and every decode step in two micro-batches.
  EngineOptions split = Options(200, AdmissionKind::kIoAdaptive);
  split.micro_batches = 2;
  std::unique_ptr<Engine> late =
      MakeEngine(TinyModel(TinyConfig(), 0, 0, absl::Milliseconds(1)), split);
  EXPECT_EQ(generate(*late, true), expected);
  EXPECT_EQ(late->stats().admission.demoted, 1);
}

}  // namespace
}  // namespace pulse
