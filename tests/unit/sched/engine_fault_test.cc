// Faults injected into the CPU backend (CpuBackendOptions::copy_fault, slot_fault): a recall or a
// write-back that fails, or a layer whose misses find no device slot, makes its step fail as a
// whole; the engine runs the step once more, and no token of any request changes. A fault that
// persists fails the requests of the steps it hits, with a status that says so, and the engine
// serves the requests that come after it.
#include <atomic>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

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
using ::testing::HasSubstr;

constexpr int32_t kBlockTokens = 4;

EngineOptions Offloaded() {
  return {.max_batch = 4,
          .prefill_chunk = 16,
          .max_step_tokens = 64,
          .block_tokens = kBlockTokens,
          .kv_capacity_tokens = 96,
          .offload = OffloadConfig{.selection = {.budget_tokens = 32,
                                                 .sink_tokens = kBlockTokens,
                                                 .window_tokens = 2 * kBlockTokens},
                                   .host_tokens = 4 * 160,
                                   .slot_tokens = 4 * 160,
                                   // Picks miss, so that recall and victims can fail.
                                   .fill_free_slots = false},
          .admission = AdmissionKind::kOffloadEvery};
}

// Four requests sampled with seeds, offloaded at a budget that selects; their snapshots.
std::vector<RequestSnapshot> Generate(Engine& engine, uint32_t seed) {
  std::vector<RequestId> ids;
  for (uint32_t i = 0; i < 4; ++i) {
    SamplingParams params = testing::Greedy(16, true);
    params.temperature = 0.8f;
    params.seed = seed + i;
    ids.push_back(
        *engine.Submit(Prompt(40 + 3 * static_cast<int32_t>(i), TinyConfig().vocab_size, seed + i),
                       params, nullptr));
  }
  RunToIdle(engine);
  std::vector<RequestSnapshot> snapshots;
  for (const RequestId id : ids) snapshots.push_back(SnapshotOf(engine, id));
  return snapshots;
}

std::vector<std::vector<int32_t>> Tokens(const std::vector<RequestSnapshot>& snapshots) {
  std::vector<std::vector<int32_t>> tokens;
  for (const RequestSnapshot& snapshot : snapshots) {
    EXPECT_TRUE(snapshot.error.ok()) << snapshot.error;
    tokens.push_back(snapshot.tokens);
  }
  return tokens;
}

TEST(EngineFaultTest, ACopyThatFailsOnceIsRetriedAndChangesNoToken) {
  const auto expected = Tokens(Generate(*MakeEngine(TinyModel(), Offloaded()), 11));
  // Plans 1.. are the steps' recalls and write-backs (plan 0 calibrates the link), about 45 in
  // this run; failures far enough apart that no retry's own plans fail too.
  for (const std::set<int64_t>& failing :
       {std::set<int64_t>{5}, std::set<int64_t>{25}, std::set<int64_t>{5, 40}}) {
    std::atomic<int64_t> failed{0};
    std::unique_ptr<Engine> engine = MakeEngine(TinyModel(TinyConfig(), 0, 0, absl::ZeroDuration(),
                                                          [&failing, &failed](int64_t plan) {
                                                            if (!failing.contains(plan))
                                                              return false;
                                                            ++failed;
                                                            return true;
                                                          }),
                                                Offloaded());
    EXPECT_EQ(Tokens(Generate(*engine, 11)), expected);
    EXPECT_EQ(failed, static_cast<int64_t>(failing.size()));
    EXPECT_GE(engine->stats().retried_steps, 1);
    EXPECT_LE(engine->stats().retried_steps, static_cast<int64_t>(failing.size()));
  }
}

// Four requests run a few steps on `engine`; then `fault` holds until they end. The requests of
// the steps it hit fail with an Internal status whose message has `message`, nothing stays
// allocated, and repaired, the same engine gives new requests the tokens a fresh engine gives.
void ExpectAPersistentFaultFailsOnlyItsSteps(Engine& engine, std::atomic<bool>& fault,
                                             std::string_view message) {
  std::vector<RequestId> ids;
  for (uint32_t i = 0; i < 4; ++i) {
    ids.push_back(*engine.Submit(Prompt(40, TinyConfig().vocab_size, 50 + i),
                                 testing::Greedy(16, true), nullptr));
  }
  for (int32_t step = 0; step < 12; ++step) ASSERT_TRUE(engine.Step().ok());
  fault = true;
  RunToIdle(engine);
  int32_t failed = 0;
  for (const RequestId id : ids) {
    const RequestSnapshot snapshot = SnapshotOf(engine, id);
    EXPECT_EQ(snapshot.state, RequestState::kFinished);
    if (snapshot.reason != FinishReason::kError) continue;
    ++failed;
    EXPECT_EQ(snapshot.error.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(snapshot.error.message(), HasSubstr(message));
  }
  EXPECT_GT(failed, 0);
  EXPECT_EQ(engine.stats().kv_blocks_in_use, 0);
  EXPECT_EQ(engine.stats().host_blocks_in_use, 0);
  fault = false;
  const auto expected = Tokens(Generate(*MakeEngine(TinyModel(), Offloaded()), 21));
  EXPECT_EQ(Tokens(Generate(engine, 21)), expected);
}

TEST(EngineFaultTest, AFaultThatPersistsFailsTheStepsRequestsAndTheEngineServesOn) {
  std::atomic<bool> broken{false};
  std::unique_ptr<Engine> engine =
      MakeEngine(TinyModel(TinyConfig(), 0, 0, absl::ZeroDuration(),
                           [&broken](int64_t) { return broken.load(); }),
                 Offloaded());
  ExpectAPersistentFaultFailsOnlyItsSteps(*engine, broken, "copy plan failed");
}

// The device tier exhausted in the middle of a step: an offloaded layer whose misses find no slot
// to evict (slot_fault) fails its step after the step's other layers ran; the runner clears the
// slot directory and the retried step gives every request its tokens. Persisting, it fails the
// hit steps' requests with a status saying so, and the engine serves on.
TEST(EngineFaultTest, ADeviceTierExhaustedMidStepIsRetriedAndThenFailsOnlyItsRequests) {
  const auto expected = Tokens(Generate(*MakeEngine(TinyModel(), Offloaded()), 11));
  std::atomic<int64_t> starved{0};
  // The tiny model has two layers: build 37 is the second layer of a step in the run's middle.
  std::unique_ptr<Engine> engine =
      MakeEngine(TinyModel(TinyConfig(), 0, 0, absl::ZeroDuration(), nullptr,
                           [&starved](int64_t build) {
                             if (build != 37) return false;
                             ++starved;
                             return true;
                           }),
                 Offloaded());
  EXPECT_EQ(Tokens(Generate(*engine, 11)), expected);
  EXPECT_EQ(starved, 1);
  EXPECT_EQ(engine->stats().retried_steps, 1);

  std::atomic<bool> exhausted{false};
  engine = MakeEngine(TinyModel(TinyConfig(), 0, 0, absl::ZeroDuration(), nullptr,
                                [&exhausted](int64_t) { return exhausted.load(); }),
                      Offloaded());
  ExpectAPersistentFaultFailsOnlyItsSteps(*engine, exhausted, "found no device slot");
}

}  // namespace
}  // namespace pulse
