#include "core/sched/engine.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

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
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// A request of the mixed workload: its prompt and how it samples.
struct Spec {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

SamplingParams Sampling(float temperature, int32_t max_tokens, uint64_t seed = 0) {
  SamplingParams params;
  params.temperature = temperature;
  params.max_tokens = max_tokens;
  params.seed = seed;
  return params;
}

// Six requests with different prompt lengths, seeds and sampling settings.
std::vector<Spec> MixedSpecs() {
  const int32_t vocab = TinyConfig().vocab_size;
  std::vector<Spec> specs;
  specs.push_back({Prompt(3, vocab, 1), Sampling(0.0f, 12)});
  specs.push_back({Prompt(17, vocab, 2), Sampling(0.8f, 15, 11)});
  specs.back().params.top_k = 20;
  specs.push_back({Prompt(40, vocab, 3), Sampling(1.0f, 10, 12)});
  specs.back().params.top_p = 0.9f;
  specs.push_back({Prompt(1, vocab, 4), Sampling(1.2f, 20, 13)});
  specs.back().params.min_p = 0.05f;
  specs.push_back({Prompt(64, vocab, 5), Sampling(0.7f, 14, 14)});
  specs.back().params.top_k = 10;
  specs.back().params.top_p = 0.8f;
  specs.back().params.repetition_penalty = 1.3f;
  specs.push_back({Prompt(9, vocab, 6), Sampling(0.0f, 16)});
  specs.back().params.repetition_penalty = 1.5f;
  return specs;
}

std::vector<int32_t> GenerateAlone(Engine& engine, const Spec& spec) {
  const absl::StatusOr<RequestId> id = engine.Submit(spec.prompt, spec.params, nullptr);
  EXPECT_TRUE(id.ok()) << id.status();
  RunToIdle(engine);
  return SnapshotOf(engine, *id).tokens;
}

// Each spec run alone, one after another on one engine.
std::vector<std::vector<int32_t>> AloneResults(std::shared_ptr<const Model> model,
                                               const std::vector<Spec>& specs) {
  std::unique_ptr<Engine> engine = MakeEngine(std::move(model));
  std::vector<std::vector<int32_t>> results;
  for (const Spec& spec : specs) results.push_back(GenerateAlone(*engine, spec));
  return results;
}

EngineOptions SmallSteps() {
  EngineOptions options;
  options.prefill_chunk = 5;
  options.max_step_tokens = 16;
  options.block_tokens = 4;
  return options;
}

class EngineTest : public ::testing::Test {
 protected:
  std::shared_ptr<const Model> model_ = TinyModel();
};

TEST_F(EngineTest, AloneRunsFinishWithMaxTokens) {
  const std::vector<Spec> specs = MixedSpecs();
  const std::vector<std::vector<int32_t>> alone = AloneResults(model_, specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(alone[i].size(), static_cast<size_t>(specs[i].params.max_tokens)) << i;
  }
  // The sampled requests do not all collapse to one token.
  EXPECT_NE(alone[1], std::vector<int32_t>(alone[1].size(), alone[1][0]));
}

TEST_F(EngineTest, ConcurrentRequestsGiveTheTokensEachGivesAlone) {
  const std::vector<Spec> specs = MixedSpecs();
  const std::vector<std::vector<int32_t>> alone = AloneResults(model_, specs);
  for (const EngineOptions& options : {EngineOptions{}, SmallSteps()}) {
    std::unique_ptr<Engine> engine = MakeEngine(model_, options);
    std::vector<RequestId> ids;
    for (const Spec& spec : specs)
      ids.push_back(*engine->Submit(spec.prompt, spec.params, nullptr));
    RunToIdle(*engine);
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_THAT(SnapshotOf(*engine, ids[i]).tokens, ElementsAreArray(alone[i]))
          << "request " << i << ", prefill_chunk " << options.prefill_chunk;
    }
  }
}

TEST_F(EngineTest, RequestsJoiningMidwayGiveTheTokensTheyGiveAlone) {
  const std::vector<Spec> specs = MixedSpecs();
  const std::vector<std::vector<int32_t>> alone = AloneResults(model_, specs);
  std::unique_ptr<Engine> engine = MakeEngine(model_, SmallSteps());
  std::vector<RequestId> ids;
  for (const Spec& spec : specs) {
    ids.push_back(*engine->Submit(spec.prompt, spec.params, nullptr));
    // Three steps between arrivals: the earlier requests are mid-prefill or decoding.
    for (int32_t step = 0; step < 3; ++step) ASSERT_TRUE(engine->Step().ok());
  }
  RunToIdle(*engine);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_THAT(SnapshotOf(*engine, ids[i]).tokens, ElementsAreArray(alone[i])) << i;
  }
}

TEST_F(EngineTest, ChunkedPrefillSpansStepsWhileOthersDecode) {
  std::unique_ptr<Engine> engine = MakeEngine(model_, SmallSteps());
  const RequestId short_id =
      *engine->Submit(Prompt(2, TinyConfig().vocab_size, 1), Sampling(0.0f, 30), nullptr);
  ASSERT_TRUE(engine->Step().ok());  // prefills the short prompt, samples its first token
  const RequestId long_id =
      *engine->Submit(Prompt(40, TinyConfig().vocab_size, 2), Sampling(0.0f, 2), nullptr);
  int32_t steps_with_both = 0;
  for (int32_t step = 0; step < 8; ++step) {
    const StepReport report = *engine->Step();
    if (report.decode_tokens == 1 && report.prefill_tokens == 5) ++steps_with_both;
  }
  // 40 prompt tokens in chunks of 5 take 8 steps, each beside one decode token.
  EXPECT_EQ(steps_with_both, 8);
  EXPECT_EQ(SnapshotOf(*engine, long_id).tokens.size(), 1u);
  EXPECT_EQ(SnapshotOf(*engine, short_id).tokens.size(), 9u);
}

// The logits the first token is drawn from: those of the last prompt position.
std::vector<float> FirstLogits(std::shared_ptr<const Model> model, EngineOptions options,
                               const std::vector<int32_t>& prompt) {
  options.logits_to_host = true;
  std::unique_ptr<Engine> engine = MakeEngine(std::move(model), options);
  std::vector<float> logits;
  const auto sink = [&logits](const TokenEvent& event) {
    if (event.index == 0) logits.assign(event.logits.begin(), event.logits.end());
    return true;
  };
  EXPECT_TRUE(engine->Submit(prompt, Sampling(0.0f, 1), sink).ok());
  RunToIdle(*engine);
  return logits;
}

TEST_F(EngineTest, ChunkedPrefillLogitsEqualUnchunkedBitwise) {
  const std::vector<int32_t> prompt = Prompt(50, TinyConfig().vocab_size, 9);
  const std::vector<float> whole = FirstLogits(model_, {}, prompt);
  ASSERT_EQ(whole.size(), static_cast<size_t>(TinyConfig().vocab_size));
  for (const int32_t chunk : {1, 7, 32}) {
    EngineOptions options;
    options.prefill_chunk = chunk;
    options.block_tokens = 4;
    const std::vector<float> chunked = FirstLogits(model_, options, prompt);
    ASSERT_EQ(chunked.size(), whole.size());
    EXPECT_EQ(std::memcmp(chunked.data(), whole.data(), whole.size() * sizeof(float)), 0)
        << "chunk " << chunk;
  }
}

TEST_F(EngineTest, SamplingOnTheBackendOrTheHostDrawsTheSameTokens) {
  const std::vector<SamplingParams> params = {
      Sampling(0.0f, 12),
      {.temperature = 0.9f, .top_k = 20, .top_p = 0.9f, .seed = 11, .max_tokens = 12},
      {.temperature = 1.1f,
       .min_p = 0.05f,
       .repetition_penalty = 1.3f,
       .seed = 12,
       .max_tokens = 12}};
  std::vector<std::vector<int32_t>> tokens[2];
  for (const bool on_host : {false, true}) {
    std::unique_ptr<Engine> engine = MakeEngine(model_, {.logits_to_host = on_host});
    std::vector<RequestId> ids;
    for (size_t r = 0; r < params.size(); ++r) {
      ids.push_back(
          *engine->Submit(Prompt(6 + r, TinyConfig().vocab_size, 20 + r), params[r], nullptr));
    }
    RunToIdle(*engine);
    for (const RequestId id : ids) tokens[on_host].push_back(SnapshotOf(*engine, id).tokens);
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  for (const std::vector<int32_t>& generated : tokens[0]) EXPECT_EQ(generated.size(), 12u);
}

TEST_F(EngineTest, SinkSeesOneEventPerTokenAndTheLastIsFinished) {
  std::unique_ptr<Engine> engine = MakeEngine(model_, {.logits_to_host = true});
  std::vector<TokenEvent> events;
  const auto sink = [&events](const TokenEvent& event) {
    EXPECT_EQ(event.logits.size(), static_cast<size_t>(TinyConfig().vocab_size));
    events.push_back(event);
    return true;
  };
  const RequestId id =
      *engine->Submit(Prompt(5, TinyConfig().vocab_size, 3), Sampling(0.9f, 7, 5), sink);
  RunToIdle(*engine);
  const RequestSnapshot snapshot = SnapshotOf(*engine, id);
  ASSERT_EQ(events.size(), 7u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].id, id);
    EXPECT_EQ(events[i].index, static_cast<int32_t>(i));
    EXPECT_EQ(events[i].token, snapshot.tokens[i]);
    EXPECT_EQ(events[i].finished, i + 1 == events.size());
  }
  EXPECT_EQ(events.back().reason, FinishReason::kMaxTokens);
  EXPECT_EQ(snapshot.state, RequestState::kFinished);
  EXPECT_EQ(snapshot.reason, FinishReason::kMaxTokens);
}

TEST_F(EngineTest, StopTokenFinishesAndIsPartOfTheOutput) {
  std::unique_ptr<Engine> engine = MakeEngine(model_);
  const std::vector<int32_t> prompt = Prompt(6, TinyConfig().vocab_size, 4);
  const std::vector<int32_t> free_run = GenerateAlone(*engine, {prompt, Sampling(0.0f, 10)});
  // Stop at the first occurrence of the third token.
  SamplingParams params = Sampling(0.0f, 10);
  params.stop_token_ids = {free_run[2]};
  const size_t stop_at =
      std::find(free_run.begin(), free_run.end(), free_run[2]) - free_run.begin();
  const RequestId id = *engine->Submit(prompt, params, nullptr);
  RunToIdle(*engine);
  const RequestSnapshot snapshot = SnapshotOf(*engine, id);
  EXPECT_EQ(snapshot.reason, FinishReason::kStopToken);
  EXPECT_THAT(snapshot.tokens, ElementsAreArray(free_run.begin(), free_run.begin() + stop_at + 1));
}

TEST(EngineEosTest, TheModelsEosStopsUnlessIgnored) {
  const std::vector<int32_t> prompt = Prompt(6, TinyConfig().vocab_size, 4);
  std::vector<int32_t> free_run;
  {
    std::unique_ptr<Engine> engine = MakeEngine(TinyModel());
    free_run = GenerateAlone(*engine, {prompt, Sampling(0.0f, 10)});
  }
  ModelConfig config = TinyConfig();
  config.eos_token_ids = {free_run[1]};
  std::unique_ptr<Engine> engine = MakeEngine(TinyModel(config));
  const RequestId stopped = *engine->Submit(prompt, Sampling(0.0f, 10), nullptr);
  SamplingParams ignoring = Sampling(0.0f, 10);
  ignoring.ignore_eos = true;
  const RequestId ignored = *engine->Submit(prompt, ignoring, nullptr);
  RunToIdle(*engine);
  const RequestSnapshot stopped_snapshot = SnapshotOf(*engine, stopped);
  EXPECT_EQ(stopped_snapshot.reason, FinishReason::kStopToken);
  EXPECT_EQ(stopped_snapshot.tokens.back(), free_run[1]);
  EXPECT_LE(stopped_snapshot.tokens.size(), 2u);
  const RequestSnapshot ignored_snapshot = SnapshotOf(*engine, ignored);
  EXPECT_EQ(ignored_snapshot.reason, FinishReason::kMaxTokens);
  EXPECT_EQ(ignored_snapshot.tokens, free_run);
}

TEST_F(EngineTest, MaxContextFinishesWithContext) {
  EngineOptions options;
  options.max_context = 16;
  std::unique_ptr<Engine> engine = MakeEngine(model_, options);
  const RequestId id =
      *engine->Submit(Prompt(10, TinyConfig().vocab_size, 5), Sampling(0.0f, 100), nullptr);
  RunToIdle(*engine);
  const RequestSnapshot snapshot = SnapshotOf(*engine, id);
  EXPECT_EQ(snapshot.reason, FinishReason::kContext);
  EXPECT_EQ(snapshot.tokens.size(), 6u);
  // Exactly reaching max_context with max_tokens counts as max_tokens.
  const RequestId exact =
      *engine->Submit(Prompt(10, TinyConfig().vocab_size, 5), Sampling(0.0f, 6), nullptr);
  RunToIdle(*engine);
  EXPECT_EQ(SnapshotOf(*engine, exact).reason, FinishReason::kMaxTokens);
}

TEST_F(EngineTest, CancellationFreesBlocksAndOthersContinueUnchanged) {
  const std::vector<Spec> specs = MixedSpecs();
  const std::vector<std::vector<int32_t>> alone = AloneResults(model_, specs);
  std::unique_ptr<Engine> engine = MakeEngine(model_, SmallSteps());
  std::vector<RequestId> ids;
  for (const Spec& spec : specs) ids.push_back(*engine->Submit(spec.prompt, spec.params, nullptr));
  for (int32_t step = 0; step < 6; ++step) ASSERT_TRUE(engine->Step().ok());
  const int32_t in_use = engine->stats().kv_blocks_in_use;
  ASSERT_EQ(SnapshotOf(*engine, ids[1]).state, RequestState::kRunning);
  const size_t tokens_before = SnapshotOf(*engine, ids[1]).tokens.size();
  ASSERT_TRUE(engine->Cancel(ids[1]).ok());
  // Request 1 reserved ceil((17 + 15 - 1) / 4) = 8 blocks; they are back now.
  EXPECT_EQ(engine->stats().kv_blocks_in_use, in_use - 8);
  RunToIdle(*engine);
  const RequestSnapshot cancelled = SnapshotOf(*engine, ids[1]);
  EXPECT_EQ(cancelled.state, RequestState::kFinished);
  EXPECT_EQ(cancelled.reason, FinishReason::kCancelled);
  EXPECT_EQ(cancelled.tokens.size(), tokens_before);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i == 1) continue;
    EXPECT_THAT(SnapshotOf(*engine, ids[i]).tokens, ElementsAreArray(alone[i])) << i;
  }
  EXPECT_EQ(engine->stats().kv_blocks_in_use, 0);
  // Cancelling a finished request changes nothing.
  EXPECT_TRUE(engine->Cancel(ids[0]).ok());
  EXPECT_EQ(SnapshotOf(*engine, ids[0]).reason, FinishReason::kMaxTokens);
}

TEST_F(EngineTest, SinkReturningFalseCancelsWithNoFurtherEvents) {
  std::unique_ptr<Engine> engine = MakeEngine(model_);
  int32_t events = 0;
  const auto sink = [&events](const TokenEvent&) { return ++events < 3; };
  const RequestId id =
      *engine->Submit(Prompt(4, TinyConfig().vocab_size, 6), Sampling(0.0f, 20), sink);
  RunToIdle(*engine);
  EXPECT_EQ(events, 3);
  const RequestSnapshot snapshot = SnapshotOf(*engine, id);
  EXPECT_EQ(snapshot.reason, FinishReason::kCancelled);
  EXPECT_EQ(snapshot.tokens.size(), 3u);
}

TEST_F(EngineTest, CancelFromASinkStopsTheOtherRequestsEventsOfTheSameStep) {
  std::unique_ptr<Engine> engine = MakeEngine(model_);
  RequestId victim = 0;
  int32_t victim_events = 0;
  const auto killer = [&](const TokenEvent& event) {
    if (event.index == 1) {
      EXPECT_TRUE(engine->Cancel(victim).ok());
    }
    return true;
  };
  const auto victim_sink = [&victim_events](const TokenEvent&) {
    ++victim_events;
    return true;
  };
  // The killer is submitted first, so its event comes first in each step.
  ASSERT_TRUE(
      engine->Submit(Prompt(4, TinyConfig().vocab_size, 7), Sampling(0.0f, 5), killer).ok());
  victim = *engine->Submit(Prompt(4, TinyConfig().vocab_size, 8), Sampling(0.0f, 5), victim_sink);
  RunToIdle(*engine);
  // Both sample their first token in step 1; in step 2 the killer's event cancels the victim
  // before the victim's second event is delivered.
  EXPECT_EQ(victim_events, 1);
  EXPECT_EQ(SnapshotOf(*engine, victim).reason, FinishReason::kCancelled);
}

TEST_F(EngineTest, RequestThatDoesNotFitNowWaitsAndRunsLater) {
  const std::vector<int32_t> prompt = Prompt(10, TinyConfig().vocab_size, 10);
  const SamplingParams params = Sampling(0.0f, 11);
  std::vector<int32_t> alone;
  {
    std::unique_ptr<Engine> engine = MakeEngine(model_);
    alone = GenerateAlone(*engine, {prompt, params});
  }
  EngineOptions options;
  options.block_tokens = 4;
  options.kv_capacity_tokens = 24;  // 6 blocks: one request of 10 + 11 - 1 = 20 tokens (5)
  std::unique_ptr<Engine> engine = MakeEngine(model_, options);
  const RequestId first = *engine->Submit(prompt, params, nullptr);
  const RequestId second = *engine->Submit(prompt, params, nullptr);
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(SnapshotOf(*engine, first).state, RequestState::kRunning);
  EXPECT_EQ(SnapshotOf(*engine, second).state, RequestState::kQueued);
  EXPECT_EQ(engine->stats().queued, 1);
  while (SnapshotOf(*engine, first).state != RequestState::kFinished) {
    ASSERT_TRUE(engine->Step().ok());
    EXPECT_NE(SnapshotOf(*engine, second).state, RequestState::kFinished);
  }
  RunToIdle(*engine);
  EXPECT_EQ(SnapshotOf(*engine, first).tokens, alone);
  EXPECT_EQ(SnapshotOf(*engine, second).tokens, alone);
  EXPECT_GT(SnapshotOf(*engine, second).stats.queue_ms, 0.0);
}

TEST_F(EngineTest, RequestThatCanNeverFitIsRejectedAtSubmit) {
  EngineOptions options;
  options.block_tokens = 4;
  options.kv_capacity_tokens = 24;
  std::unique_ptr<Engine> engine = MakeEngine(model_, options);
  // 10 + 20 - 1 = 29 tokens need 8 blocks of the 6.
  const absl::StatusOr<RequestId> id =
      engine->Submit(Prompt(10, TinyConfig().vocab_size, 1), Sampling(0.0f, 20), nullptr);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(id.status().message(), HasSubstr("29 tokens"));
  EXPECT_EQ(engine->pending(), 0);
  // The exact fit is accepted: 10 + 15 - 1 = 24 tokens.
  EXPECT_TRUE(
      engine->Submit(Prompt(10, TinyConfig().vocab_size, 1), Sampling(0.0f, 15), nullptr).ok());
}

TEST_F(EngineTest, InvalidPromptsAndParamsAreRejectedWithMessages) {
  EngineOptions options;
  options.max_context = 32;
  std::unique_ptr<Engine> engine = MakeEngine(model_, options);
  const auto expect_invalid = [&](std::vector<int32_t> prompt, const SamplingParams& params,
                                  const char* message) {
    const absl::StatusOr<RequestId> id = engine->Submit(std::move(prompt), params, nullptr);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(id.status().message(), HasSubstr(message));
  };
  const SamplingParams ok = Sampling(0.0f, 4);
  expect_invalid({}, ok, "empty");
  expect_invalid({1, 101, 2}, ok, "prompt token 101 at position 1");
  expect_invalid({-3}, ok, "prompt token -3 at position 0");
  expect_invalid(std::vector<int32_t>(32, 1), ok, "shorter than max_context (32)");
  SamplingParams bad_top_p = ok;
  bad_top_p.top_p = 0.0f;
  expect_invalid({1}, bad_top_p, "top_p");
  SamplingParams bad_stop = ok;
  bad_stop.stop_token_ids = {200};
  expect_invalid({1}, bad_stop, "stop token id 200");
  EXPECT_EQ(engine->pending(), 0);
}

TEST_F(EngineTest, RequestLifecycleErrors) {
  std::unique_ptr<Engine> engine = MakeEngine(model_);
  EXPECT_EQ(engine->Cancel(42).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->Snapshot(42).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->Release(42).code(), absl::StatusCode::kNotFound);
  const RequestId id = *engine->Submit({1, 2, 3}, Sampling(0.0f, 3), nullptr);
  EXPECT_EQ(SnapshotOf(*engine, id).state, RequestState::kQueued);
  EXPECT_EQ(engine->Release(id).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(SnapshotOf(*engine, id).state, RequestState::kRunning);
  EXPECT_EQ(engine->Release(id).code(), absl::StatusCode::kFailedPrecondition);
  RunToIdle(*engine);
  EXPECT_TRUE(engine->Release(id).ok());
  EXPECT_EQ(engine->Snapshot(id).status().code(), absl::StatusCode::kNotFound);
  // A queued request can be cancelled before it ever runs.
  const RequestId queued = *engine->Submit({1, 2, 3}, Sampling(0.0f, 3), nullptr);
  ASSERT_TRUE(engine->Cancel(queued).ok());
  EXPECT_EQ(SnapshotOf(*engine, queued).reason, FinishReason::kCancelled);
  EXPECT_EQ(engine->pending(), 0);
  const StepReport idle = *engine->Step();
  EXPECT_EQ(idle.scheduled, 0);
  EXPECT_EQ(idle.pending, 0);
}

TEST_F(EngineTest, StatsAreFilledAndSane) {
  std::unique_ptr<Engine> engine = MakeEngine(model_, SmallSteps());
  const RequestId a =
      *engine->Submit(Prompt(12, TinyConfig().vocab_size, 1), Sampling(0.0f, 6), nullptr);
  const RequestId b =
      *engine->Submit(Prompt(3, TinyConfig().vocab_size, 2), Sampling(0.0f, 1), nullptr);
  RunToIdle(*engine);
  for (const RequestId id : {a, b}) {
    const RequestStats stats = SnapshotOf(*engine, id).stats;
    EXPECT_GE(stats.queue_ms, 0.0);
    EXPECT_GE(stats.ttft_ms, stats.queue_ms);
    EXPECT_GE(stats.total_ms, stats.ttft_ms);
    EXPECT_GE(stats.tpot_ms, 0.0);
  }
  const RequestStats stats_a = SnapshotOf(*engine, a).stats;
  EXPECT_EQ(stats_a.prompt_tokens, 12);
  EXPECT_EQ(stats_a.generated_tokens, 6);
  EXPECT_GT(stats_a.tpot_ms, 0.0);
  EXPECT_LE(stats_a.tpot_ms * 5, stats_a.total_ms - stats_a.ttft_ms + 1e-9);
  EXPECT_EQ(SnapshotOf(*engine, b).stats.tpot_ms, 0.0);  // one token: no interval
  const EngineStats totals = engine->stats();
  EXPECT_EQ(totals.prefill_tokens, 15);
  EXPECT_EQ(totals.generated_tokens, 7);
  EXPECT_EQ(totals.decode_tokens, 5);  // a's tokens 1..5 fed back; the last is never fed
  EXPECT_EQ(totals.finished_requests, 2);
  EXPECT_GE(totals.steps, 6);
  EXPECT_EQ(totals.queued + totals.running, 0);
  EXPECT_EQ(totals.kv_blocks_in_use, 0);
}

TEST_F(EngineTest, SubmitAndCancelFromAnotherThreadWhileStepping) {
  const std::vector<Spec> specs = MixedSpecs();
  const std::vector<std::vector<int32_t>> alone = AloneResults(model_, specs);
  std::unique_ptr<Engine> engine = MakeEngine(model_, SmallSteps());
  std::atomic<bool> submitted{false};
  std::vector<RequestId> ids;
  std::thread client([&] {
    for (int32_t round = 0; round < 3; ++round) {
      for (const Spec& spec : specs) {
        ids.push_back(*engine->Submit(spec.prompt, spec.params, nullptr));
      }
      // Every third request of the round is cancelled, wherever it is by then.
      for (size_t i = ids.size() - specs.size(); i < ids.size(); i += 3) {
        EXPECT_TRUE(engine->Cancel(ids[i]).ok());
      }
    }
    submitted = true;
  });
  while (!submitted || engine->pending() > 0) ASSERT_TRUE(engine->Step().ok());
  client.join();
  for (size_t i = 0; i < ids.size(); ++i) {
    const RequestSnapshot snapshot = SnapshotOf(*engine, ids[i]);
    EXPECT_EQ(snapshot.state, RequestState::kFinished);
    const std::vector<int32_t>& expected = alone[i % specs.size()];
    // A cancel that loses the race with the request's last step finds it finished.
    if (snapshot.reason == FinishReason::kCancelled) {
      EXPECT_EQ(i % specs.size() % 3, 0u) << i;
      // What it generated before the cancel is a prefix of its tokens alone.
      EXPECT_THAT(snapshot.tokens,
                  ElementsAreArray(expected.begin(), expected.begin() + snapshot.tokens.size()));
    } else {
      EXPECT_THAT(snapshot.tokens, ElementsAreArray(expected)) << i;
    }
  }
  EXPECT_EQ(engine->stats().kv_blocks_in_use, 0);
}

TEST(EngineCreateTest, BadOptionsAndTooLargeCachesAreRejected) {
  std::shared_ptr<const Model> model = TinyModel();
  EngineOptions zero_batch;
  zero_batch.max_batch = 0;
  EXPECT_EQ(Engine::Create(model, zero_batch).status().code(), absl::StatusCode::kInvalidArgument);
  EngineOptions small_step;
  small_step.max_step_tokens = 8;  // below max_batch = 16
  EXPECT_EQ(Engine::Create(model, small_step).status().code(), absl::StatusCode::kInvalidArgument);
  EngineOptions long_context;
  long_context.max_context = TinyConfig().max_position + 1;
  const absl::Status status = Engine::Create(model, long_context).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("max_context"));
  EXPECT_EQ(Engine::Create(nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);

  std::shared_ptr<const Model> capped = TinyModel(TinyConfig(), /*memory_limit=*/1 << 20);
  EngineOptions huge_cache;
  huge_cache.kv_capacity_tokens = 1 << 20;
  const absl::Status exhausted = Engine::Create(capped, huge_cache).status();
  EXPECT_EQ(exhausted.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(exhausted.message(), HasSubstr("KV cache"));
}

}  // namespace
}  // namespace pulse
