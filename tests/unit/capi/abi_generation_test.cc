// Real generations on the tiny random model through the ABI: token callbacks, polling, results,
// statistics, cancellation and release.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pulseinfer/pulseinfer.h"
#include "tiny_model.h"

namespace {

using pulse::capi_test::CreateTinyEngine;
using pulse::capi_test::GreedySampling;
using pulse::capi_test::kTinyVocab;
using pulse::capi_test::LoadTinyModel;
using pulse::capi_test::TinyPrompt;

std::string LastError() { return pulse_last_error(); }

struct Recorded {
  std::vector<pulse_token_event> events;
  int cancel_at_index = -1;  // the callback returns nonzero on this event
};

int Record(void* user_data, const pulse_token_event* event) {
  auto* recorded = static_cast<Recorded*>(user_data);
  recorded->events.push_back(*event);
  return event->index == recorded->cancel_at_index ? 1 : 0;
}

class AbiGeneration : public testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadTinyModel();
    ASSERT_NE(model_, nullptr);
    engine_ = CreateTinyEngine(model_);
    ASSERT_NE(engine_, nullptr);
  }
  void TearDown() override {
    pulse_engine_free(engine_);
    pulse_model_free(model_);
  }

  uint64_t Submit(const std::vector<int32_t>& prompt, const pulse_sampling_params& sampling,
                  Recorded* recorded = nullptr) {
    uint64_t id = 0;
    EXPECT_EQ(pulse_request_submit(engine_, prompt.data(), prompt.size(), &sampling,
                                   recorded != nullptr ? Record : nullptr, recorded, &id),
              PULSE_OK)
        << LastError();
    EXPECT_NE(id, 0u);
    return id;
  }

  // Every token of a request by pulse_request_result; expects `status`.
  std::vector<int32_t> Result(uint64_t id, pulse_status status = PULSE_OK) {
    size_t count = 0;
    EXPECT_EQ(pulse_request_result(engine_, id, nullptr, 0, &count), status) << LastError();
    std::vector<int32_t> tokens(count);
    EXPECT_EQ(pulse_request_result(engine_, id, tokens.data(), tokens.size(), &count), status);
    EXPECT_EQ(count, tokens.size());
    return tokens;
  }

  pulse_request_stats Stats(uint64_t id) {
    pulse_request_stats stats;
    stats.struct_size = sizeof(stats);
    EXPECT_EQ(pulse_request_stats_get(engine_, id, &stats), PULSE_OK) << LastError();
    return stats;
  }

  pulse_model* model_ = nullptr;
  pulse_engine* engine_ = nullptr;
};

TEST_F(AbiGeneration, CallbackPollAndResultAgree) {
  constexpr int kMaxTokens = 12;
  const std::vector<int32_t> prompt = TinyPrompt(40);
  Recorded recorded;
  const uint64_t streamed = Submit(prompt, GreedySampling(kMaxTokens), &recorded);
  const uint64_t polled = Submit(prompt, GreedySampling(kMaxTokens));
  ASSERT_NE(streamed, polled);

  std::vector<int32_t> polled_tokens;
  pulse_request_state state = PULSE_REQUEST_QUEUED;
  int steps = 0;
  while (state != PULSE_REQUEST_FINISHED) {
    ASSERT_LT(steps++, 200) << "the request does not finish";
    pulse_step_report report;
    report.struct_size = sizeof(report);
    ASSERT_EQ(pulse_engine_step(engine_, &report), PULSE_OK) << LastError();
    int32_t buffer[3];  // smaller than one step's worth sometimes: polls resume where they left
    size_t count = 0;
    do {
      ASSERT_EQ(pulse_request_poll(engine_, polled, buffer, 3, &count, &state), PULSE_OK)
          << LastError();
      polled_tokens.insert(polled_tokens.end(), buffer, buffer + count);
    } while (count == 3);
  }

  std::vector<int32_t> streamed_tokens;
  for (size_t i = 0; i < recorded.events.size(); ++i) {
    const pulse_token_event& event = recorded.events[i];
    EXPECT_EQ(event.struct_size, sizeof(pulse_token_event));
    EXPECT_EQ(event.request_id, streamed);
    EXPECT_EQ(event.index, static_cast<int32_t>(i));
    EXPECT_GE(event.token, 0);
    EXPECT_LT(event.token, kTinyVocab);
    const bool last = i + 1 == recorded.events.size();
    EXPECT_EQ(event.finished, last ? 1 : 0);
    EXPECT_EQ(event.finish_reason, last ? PULSE_FINISH_MAX_TOKENS : PULSE_FINISH_NONE);
    streamed_tokens.push_back(event.token);
  }
  ASSERT_EQ(streamed_tokens.size(), size_t{kMaxTokens});
  // Greedy decoding of the same prompt: the same tokens, however they are read.
  EXPECT_EQ(polled_tokens, streamed_tokens);
  EXPECT_EQ(Result(streamed), streamed_tokens);
  EXPECT_EQ(Result(polled), streamed_tokens);

  const pulse_request_stats stats = Stats(streamed);
  EXPECT_EQ(stats.state, PULSE_REQUEST_FINISHED);
  EXPECT_EQ(stats.finish_reason, PULSE_FINISH_MAX_TOKENS);
  EXPECT_EQ(stats.prompt_tokens, 40);
  EXPECT_EQ(stats.generated_tokens, kMaxTokens);
  EXPECT_EQ(stats.error, PULSE_OK);
  EXPECT_GT(stats.ttft_ms, 0.0);
  EXPECT_GE(stats.total_ms, stats.ttft_ms);
}

TEST_F(AbiGeneration, EngineStatsCountTheWork) {
  pulse_engine_stats before;
  before.struct_size = sizeof(before);
  ASSERT_EQ(pulse_engine_stats_get(engine_, &before), PULSE_OK) << LastError();
  EXPECT_EQ(before.steps, 0);
  EXPECT_GT(before.kv_blocks, 0);
  EXPECT_EQ(before.kv_blocks_in_use, 0);

  Submit(TinyPrompt(40), GreedySampling(6));
  Submit(TinyPrompt(9), GreedySampling(3));
  pulse_engine_stats queued;
  queued.struct_size = sizeof(queued);
  ASSERT_EQ(pulse_engine_stats_get(engine_, &queued), PULSE_OK) << LastError();
  EXPECT_EQ(queued.queued, 2);
  EXPECT_EQ(queued.running, 0);

  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  pulse_engine_stats after;
  after.struct_size = sizeof(after);
  ASSERT_EQ(pulse_engine_stats_get(engine_, &after), PULSE_OK) << LastError();
  EXPECT_GT(after.steps, 0);
  EXPECT_EQ(after.prefill_tokens, 49);
  EXPECT_EQ(after.generated_tokens, 9);
  EXPECT_EQ(after.finished_requests, 2);
  EXPECT_EQ(after.queued, 0);
  EXPECT_EQ(after.running, 0);
  EXPECT_EQ(after.kv_blocks, before.kv_blocks);
  EXPECT_EQ(after.kv_blocks_in_use, 0);

  EXPECT_EQ(pulse_engine_stats_get(nullptr, &after), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(pulse_engine_stats_get(engine_, nullptr), PULSE_INVALID_ARGUMENT);
  after.struct_size = 4;
  EXPECT_EQ(pulse_engine_stats_get(engine_, &after), PULSE_INVALID_ARGUMENT);
}

TEST_F(AbiGeneration, PollSizeQueryReadsNothing) {
  const uint64_t id = Submit(TinyPrompt(8), GreedySampling(5));
  size_t count = 99;
  pulse_request_state state = -1;
  ASSERT_EQ(pulse_request_poll(engine_, id, nullptr, 0, &count, &state), PULSE_OK);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(state, PULSE_REQUEST_QUEUED);
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();

  ASSERT_EQ(pulse_request_poll(engine_, id, nullptr, 0, &count, &state), PULSE_OK);
  EXPECT_EQ(count, 5u);
  EXPECT_EQ(state, PULSE_REQUEST_RUNNING) << "finished but unread reads as running";
  std::vector<int32_t> tokens(8);
  ASSERT_EQ(pulse_request_poll(engine_, id, tokens.data(), tokens.size(), &count, &state),
            PULSE_OK);
  EXPECT_EQ(count, 5u);
  EXPECT_EQ(state, PULSE_REQUEST_FINISHED);
  tokens.resize(count);
  EXPECT_EQ(tokens, Result(id));
  ASSERT_EQ(pulse_request_poll(engine_, id, nullptr, 0, &count, &state), PULSE_OK);
  EXPECT_EQ(count, 0u);
}

TEST_F(AbiGeneration, ResultWhileRunningIsAgain) {
  const uint64_t id = Submit(TinyPrompt(8), GreedySampling(6));
  EXPECT_TRUE(Result(id, PULSE_AGAIN).empty());
  EXPECT_NE(LastError().find("not finished"), std::string::npos) << LastError();
  ASSERT_EQ(pulse_engine_step(engine_, nullptr), PULSE_OK) << LastError();
  EXPECT_EQ(Result(id, PULSE_AGAIN).size(), 1u);
  EXPECT_EQ(Stats(id).state, PULSE_REQUEST_RUNNING);
}

TEST_F(AbiGeneration, CancelledRequestKeepsItsStateAndTokens) {
  const uint64_t before_start = Submit(TinyPrompt(8), GreedySampling(6));
  ASSERT_EQ(pulse_request_cancel(engine_, before_start), PULSE_OK) << LastError();
  size_t count = 9;
  pulse_request_state state = -1;
  ASSERT_EQ(pulse_request_poll(engine_, before_start, nullptr, 0, &count, &state), PULSE_OK);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(state, PULSE_REQUEST_FINISHED);
  EXPECT_TRUE(Result(before_start, PULSE_CANCELLED).empty());
  EXPECT_EQ(Stats(before_start).finish_reason, PULSE_FINISH_CANCELLED);

  const uint64_t midway = Submit(TinyPrompt(8), GreedySampling(6));
  ASSERT_EQ(pulse_engine_step(engine_, nullptr), PULSE_OK);
  ASSERT_EQ(pulse_engine_step(engine_, nullptr), PULSE_OK);
  ASSERT_EQ(pulse_request_cancel(engine_, midway), PULSE_OK) << LastError();
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  EXPECT_EQ(Result(midway, PULSE_CANCELLED).size(), 2u);
  EXPECT_EQ(pulse_request_cancel(engine_, midway), PULSE_OK) << "cancel of a finished request";
  EXPECT_EQ(pulse_request_release(engine_, midway), PULSE_OK);
  EXPECT_EQ(pulse_request_poll(engine_, midway, nullptr, 0, &count, &state), PULSE_NOT_FOUND);
}

TEST_F(AbiGeneration, NonzeroCallbackReturnCancels) {
  Recorded recorded;
  recorded.cancel_at_index = 2;
  const uint64_t id = Submit(TinyPrompt(8), GreedySampling(10), &recorded);
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  EXPECT_EQ(recorded.events.size(), 3u);
  EXPECT_EQ(Result(id, PULSE_CANCELLED).size(), 3u);
  EXPECT_EQ(Stats(id).finish_reason, PULSE_FINISH_CANCELLED);
}

TEST_F(AbiGeneration, StopTokenEndsTheRequest) {
  constexpr int kMaxTokens = 8;
  const std::vector<int32_t> free_run = [&] {
    const uint64_t id = Submit(TinyPrompt(8), GreedySampling(kMaxTokens));
    EXPECT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
    return Result(id);
  }();
  ASSERT_EQ(free_run.size(), size_t{kMaxTokens});
  pulse_sampling_params sampling = GreedySampling(kMaxTokens);
  sampling.stop_token_ids = &free_run[3];
  sampling.stop_token_count = 1;
  const uint64_t id = Submit(TinyPrompt(8), sampling);
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  const std::vector<int32_t> stopped = Result(id);
  ASSERT_FALSE(stopped.empty());
  EXPECT_EQ(stopped.back(), free_run[3]);
  EXPECT_LE(stopped.size(), 4u);
  EXPECT_EQ(Stats(id).finish_reason, PULSE_FINISH_STOP_TOKEN);
}

TEST_F(AbiGeneration, EngineKeepsTheModelAlive) {
  pulse_model* extra = pulse_model_retain(model_);
  EXPECT_EQ(extra, model_);
  pulse_model_free(extra);
  pulse_model_free(model_);  // the engine's reference remains
  model_ = nullptr;
  const uint64_t id = Submit(TinyPrompt(8), GreedySampling(4));
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  EXPECT_EQ(Result(id).size(), 4u);
}

TEST_F(AbiGeneration, PollFromAnotherThreadWhileStepping) {
  constexpr int kMaxTokens = 16;
  const uint64_t id = Submit(TinyPrompt(8), GreedySampling(kMaxTokens));
  std::vector<int32_t> polled;
  std::thread reader([&] {
    pulse_request_state state = PULSE_REQUEST_QUEUED;
    while (state != PULSE_REQUEST_FINISHED) {
      int32_t buffer[4];
      size_t count = 0;
      ASSERT_EQ(pulse_request_poll(engine_, id, buffer, 4, &count, &state), PULSE_OK);
      polled.insert(polled.end(), buffer, buffer + count);
      std::this_thread::yield();
    }
  });
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  reader.join();
  EXPECT_EQ(polled, Result(id));
  EXPECT_EQ(polled.size(), size_t{kMaxTokens});
}

TEST_F(AbiGeneration, ModelInfoDescribesTheTinyModel) {
  pulse_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(pulse_model_info_get(model_, &info), PULSE_OK) << LastError();
  EXPECT_STREQ(info.architecture, "llama");
  EXPECT_STREQ(info.format, "random");
  EXPECT_STREQ(info.weight_type, "f32");
  EXPECT_STREQ(info.backend, "cpu");
  EXPECT_EQ(info.num_layers, 2);
  EXPECT_EQ(info.num_heads, 4);
  EXPECT_EQ(info.num_kv_heads, 2);
  EXPECT_EQ(info.head_dim, 16);
  EXPECT_EQ(info.hidden_size, 64);
  EXPECT_EQ(info.intermediate_size, 160);
  EXPECT_EQ(info.vocab_size, kTinyVocab);
  EXPECT_EQ(info.context_length, 256);
  EXPECT_EQ(info.tie_word_embeddings, 0);
  // Embeddings and head 2*300*64; per layer: q,o 64*64 each, k,v 32*64 each, MLP 3*64*160,
  // two norms of 64; the final norm 64.
  const int64_t per_layer = 2 * 64 * 64 + 2 * 32 * 64 + 3 * 64 * 160 + 2 * 64;
  EXPECT_EQ(info.parameter_count, 2 * 300 * 64 + 2 * per_layer + 64);
}

}  // namespace

namespace {

using pulse::capi_test::GreedySampling;
using pulse::capi_test::LoadTinyModel;
using pulse::capi_test::TinyConfigPath;
using pulse::capi_test::TinyPrompt;

// Whether pulse_engine_create refuses `params` as an invalid argument whose message names
// `field`, making no engine.
::testing::AssertionResult RefusedNaming(pulse_model* model, const pulse_engine_params& params,
                                         const std::string& field) {
  pulse_engine* engine = nullptr;
  const pulse_status status = pulse_engine_create(model, &params, &engine);
  if (status != PULSE_INVALID_ARGUMENT || engine != nullptr) {
    pulse_engine_free(engine);
    return ::testing::AssertionFailure() << "status " << status << ", not a refusal";
  }
  if (std::string(pulse_last_error()).find(field) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "'" << pulse_last_error() << "' does not name " << field;
  }
  return ::testing::AssertionSuccess();
}

// Generates 12 greedy tokens after each of `prompts` (by default one of 150 tokens), one after
// another in one engine of `params`; returns the last one's tokens, and the engine's stats in
// `stats`.
std::vector<int32_t> Generate(pulse_model* model, const pulse_engine_params& params,
                              pulse_engine_stats* stats,
                              const std::vector<std::vector<int32_t>>& prompts = {
                                  TinyPrompt(150)}) {
  pulse_engine* engine = nullptr;
  EXPECT_EQ(pulse_engine_create(model, &params, &engine), PULSE_OK) << pulse_last_error();
  const pulse_sampling_params sampling = GreedySampling(12);
  std::vector<int32_t> tokens(12);
  for (const std::vector<int32_t>& prompt : prompts) {
    uint64_t id = 0;
    EXPECT_EQ(pulse_request_submit(engine, prompt.data(), prompt.size(), &sampling, nullptr,
                                   nullptr, &id),
              PULSE_OK);
    EXPECT_EQ(pulse_engine_run(engine), PULSE_OK) << pulse_last_error();
    size_t count = 0;
    EXPECT_EQ(pulse_request_result(engine, id, tokens.data(), tokens.size(), &count), PULSE_OK);
  }
  stats->struct_size = sizeof(*stats);
  EXPECT_EQ(pulse_engine_stats_get(engine, stats), PULSE_OK);
  pulse_engine_free(engine);
  return tokens;
}

// The engine parameters of GenerateWith: 8-token blocks and a KV cache of 160 tokens when
// offloading (less than the request needs), every request offloaded, and recall: the blocks the
// request stops keeping resident do not fill the free slots (the slots hold its whole context).
pulse_engine_params OffloadParams(int32_t mode, int32_t budget) {
  pulse_engine_params params;
  EXPECT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  params.block_tokens = 8;
  params.kv_capacity_tokens = mode == PULSE_OFFLOAD_OFF ? 0 : 160;
  params.offload_mode = mode;
  params.offload_budget_tokens = budget;
  params.offload_sink_tokens = 8;
  params.offload_window_tokens = 16;
  params.offload_host_tokens = 1024;
  params.offload_slot_tokens = 256;
  params.offload_admission = PULSE_ADMIT_OFFLOAD_EVERY;
  params.offload_fill_free_slots = 0;
  return params;
}

// Generate with the given offload settings (OffloadParams).
std::vector<int32_t> GenerateWith(pulse_model* model, int32_t mode, int32_t budget,
                                  pulse_engine_stats* stats, int32_t executor = PULSE_COPY_AUTO,
                                  int32_t eviction = PULSE_EVICT_LRU) {
  pulse_engine_params params = OffloadParams(mode, budget);
  params.offload_executor = executor;
  params.offload_eviction = eviction;
  return Generate(model, params, stats);
}

// Placement through the ABI: with the default admission a request that fits the KV cache runs
// resident (nothing selected or recalled), with PULSE_ADMIT_OFFLOAD_EVERY it is offloaded; the
// stats say which, and a bad admission code is refused by name.
TEST(AbiOffload, AdmissionPlacesRequestsAndSaysSo) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_stats dense_stats;
  const std::vector<int32_t> dense = GenerateWith(model, PULSE_OFFLOAD_OFF, 0, &dense_stats);
  pulse_engine_params params = OffloadParams(PULSE_OFFLOAD_SOLOHEAD, 1 << 20);
  params.kv_capacity_tokens = 0;  // room for the whole request
  params.offload_admission = PULSE_ADMIT_IO_ADAPTIVE;
  pulse_engine_stats stats;
  EXPECT_EQ(Generate(model, params, &stats), dense);
  EXPECT_EQ(stats.admitted_resident, 1);
  EXPECT_EQ(stats.admitted_offloaded, 0);
  EXPECT_EQ(stats.sparse_selections, 0);
  EXPECT_EQ(stats.recall_bytes, 0);
  params.offload_admission = PULSE_ADMIT_OFFLOAD_EVERY;
  EXPECT_EQ(Generate(model, params, &stats), dense);
  EXPECT_EQ(stats.admitted_resident, 0);
  EXPECT_EQ(stats.admitted_offloaded, 1);
  EXPECT_EQ(stats.running_offloaded, 0);
  // One request: no step splits into micro-batches.
  EXPECT_EQ(stats.micro_batches, 1);
  EXPECT_EQ(stats.split_steps, 0);
  EXPECT_EQ(stats.demoted_requests + stats.promoted_requests, 0);
  EXPECT_GT(stats.sparse_selections, 0);
  EXPECT_GT(stats.link_gb_s, 0.0);
  EXPECT_GT(stats.step_compute_ms, 0.0);
  params.offload_admission = 2;
  EXPECT_TRUE(RefusedNaming(model, params, "offload_admission"));
  pulse_model_free(model);
}

// Synthetic picks: more of each step's picks stay picked the next step at a higher stated reuse
// (on this tiny model a request decodes a few steps over a couple dozen candidates, so the
// measured share is below the stated one: the first step reuses nothing and the window feeds
// new candidates), the run repeats exactly, and a reuse outside [0, 1) is refused by name.
TEST(AbiOffload, SyntheticPicksFollowTheStatedReuse) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_params params = OffloadParams(PULSE_OFFLOAD_SOLOHEAD, 48);
  std::vector<double> measured;
  std::vector<int32_t> tokens;
  for (const double reuse : {0.3, 0.95}) {
    params.offload_synthetic_reuse = reuse;
    pulse_engine_stats stats;
    tokens = Generate(model, params, &stats);
    ASSERT_GT(stats.sparse_picked_blocks, 20);
    measured.push_back(static_cast<double>(stats.sparse_reused_blocks) /
                       static_cast<double>(stats.sparse_picked_blocks));
  }
  EXPECT_LT(measured[0], 0.5);
  EXPECT_GT(measured[1], 0.75);
  pulse_engine_stats again;
  EXPECT_EQ(Generate(model, params, &again), tokens);
  for (const double bad : {1.0, -0.5}) {
    params.offload_synthetic_reuse = bad;
    EXPECT_TRUE(RefusedNaming(model, params, "offload_synthetic_reuse")) << bad;
  }
  pulse_model_free(model);
}

// By default the blocks a request stops keeping resident fill the free device slots: the same
// tokens with far less recall (none here, where the slots hold the whole context). A value other
// than 0 or 1 is refused by name.
TEST(AbiOffload, FreeSlotsKeepTheBlocksARequestStopsKeepingResident) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_params defaults;
  ASSERT_EQ(pulse_engine_params_init(&defaults, sizeof(defaults)), PULSE_OK);
  EXPECT_EQ(defaults.offload_fill_free_slots, 1);
  pulse_engine_params params = OffloadParams(PULSE_OFFLOAD_SOLOHEAD, 48);
  pulse_engine_stats recalled;
  const std::vector<int32_t> tokens = Generate(model, params, &recalled);
  params.offload_fill_free_slots = 1;
  pulse_engine_stats kept;
  EXPECT_EQ(Generate(model, params, &kept), tokens);
  EXPECT_GT(recalled.recall_bytes, 0);
  EXPECT_EQ(kept.recall_bytes, 0);
  EXPECT_EQ(kept.slot_hits + kept.slot_misses, recalled.slot_hits + recalled.slot_misses);
  params.offload_fill_free_slots = 2;
  EXPECT_TRUE(RefusedNaming(model, params, "offload_fill_free_slots"));
  pulse_model_free(model);
}

// A least budget for admission to lower to: in [0, offload_budget_tokens], refused by name
// outside it; a budget is lowered only where recall would not keep up, which a single request
// never meets, so its tokens and stats are the same as without.
TEST(AbiOffload, ALeastBudgetIsWithinTheBudgetAndLowersNothingAlone) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_params params = OffloadParams(PULSE_OFFLOAD_SOLOHEAD, 48);
  params.offload_admission = PULSE_ADMIT_IO_ADAPTIVE;  // 160 KV tokens: the request is offloaded
  pulse_engine_stats stats;
  const std::vector<int32_t> tokens = Generate(model, params, &stats);
  params.offload_min_budget_tokens = 16;
  pulse_engine_stats lowering;
  EXPECT_EQ(Generate(model, params, &lowering), tokens);
  EXPECT_EQ(lowering.admitted_offloaded, 1);
  EXPECT_EQ(lowering.lowered_budgets, 0);
  for (const int32_t least : {-1, 49}) {
    params.offload_min_budget_tokens = least;
    EXPECT_TRUE(RefusedNaming(model, params, "offload_min_budget_tokens")) << least;
  }
  pulse_model_free(model);
}

// Prefix caching through the ABI: a request whose prompt starts with a finished one's prompt
// shares its full blocks (18 of 8 tokens of the 150), prefills the rest, and generates the tokens
// it generates without the cache; the stats count the hit; a setting other than 0 or 1 is
// refused by name.
TEST(AbiOffload, APrefixCacheSharesAFinishedPromptsBlocks) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_params params = OffloadParams(PULSE_OFFLOAD_SOLOHEAD, 64);
  std::vector<int32_t> longer = TinyPrompt(150);
  for (int32_t i = 0; i < 10; ++i) longer.push_back(longer[static_cast<size_t>(i)]);
  const std::vector<std::vector<int32_t>> prompts = {TinyPrompt(150), longer};
  pulse_engine_stats unshared;
  const std::vector<int32_t> want = Generate(model, params, &unshared, prompts);
  EXPECT_EQ(unshared.prefix_hits, 0);
  EXPECT_EQ(unshared.host_blocks_cached, 0);
  params.offload_prefix_cache = 1;
  pulse_engine_stats shared;
  EXPECT_EQ(Generate(model, params, &shared, prompts), want);
  EXPECT_EQ(shared.prefix_hits, 1);
  EXPECT_EQ(shared.prefix_hit_tokens, 144);
  EXPECT_EQ(shared.prefill_tokens, unshared.prefill_tokens - 144);
  EXPECT_EQ(shared.host_blocks_cached, 18 + 2);  // the first prompt's blocks, the second's two more
  EXPECT_EQ(shared.host_blocks_in_use, 0);
  params.offload_prefix_cache = 2;
  EXPECT_TRUE(RefusedNaming(model, params, "offload_prefix_cache"));
  pulse_model_free(model);
}

// An fp8 host tier: PULSE_HOST_CODEC_FP8 writes back and recalls about a quarter of the raw
// tier's bytes (the CPU backend's blocks are f32, and a covering budget recalls the same blocks);
// anything but the two codes is refused by name.
TEST(AbiOffload, AnFp8HostTierMovesAQuarterOfTheBytes) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_params params = OffloadParams(PULSE_OFFLOAD_SOLOHEAD, 1024);
  pulse_engine_stats raw;
  const std::vector<int32_t> tokens = Generate(model, params, &raw);
  params.offload_host_codec = PULSE_HOST_CODEC_FP8;
  pulse_engine_stats fp8;
  EXPECT_EQ(Generate(model, params, &fp8).size(), tokens.size());
  EXPECT_GT(raw.recall_bytes, 0);
  // A block of the tiny model: 8 tokens x 2 KV heads x 16 dims, keys and values, f32 (2048
  // bytes); in fp8, 512 bytes of codes after 16 bytes of scales.
  EXPECT_EQ(raw.writeback_bytes * 528, fp8.writeback_bytes * 2048);
  EXPECT_EQ(raw.recall_bytes * 528, fp8.recall_bytes * 2048);
  for (const int32_t codec : {-1, 2}) {
    params.offload_host_codec = codec;
    EXPECT_TRUE(RefusedNaming(model, params, "offload_host_codec")) << codec;
  }
  pulse_model_free(model);
}

TEST(AbiOffload, ABudgetCoveringTheContextGivesTheDenseTokens) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_stats dense_stats;
  const std::vector<int32_t> dense = GenerateWith(model, PULSE_OFFLOAD_OFF, 0, &dense_stats);
  EXPECT_EQ(dense_stats.sparse_selections, 0);
  for (const int32_t mode : {PULSE_OFFLOAD_HEADWISE, PULSE_OFFLOAD_SOLOHEAD}) {
    pulse_engine_stats stats;
    EXPECT_EQ(GenerateWith(model, mode, 1 << 20, &stats), dense) << mode;
    EXPECT_GT(stats.sparse_selections, 0);
    EXPECT_EQ(stats.sparse_attended_tokens, stats.sparse_context_tokens);
    EXPECT_EQ(stats.host_blocks, 128);
    EXPECT_EQ(stats.slot_blocks, 32);
    EXPECT_EQ(stats.host_blocks_in_use, 0);
    // 161 tokens of KV: 20 full blocks, written back once in each of the 2 layers; a block is
    // 8 tokens x 2 KV heads x 16 dims x K and V x 4 bytes.
    EXPECT_EQ(stats.writeback_bytes, 20 * 2 * (8 * 2 * 16 * 2 * 4));
    EXPECT_GT(stats.recall_bytes, 0);
    EXPECT_GT(stats.recall_transfers, 0);
    EXPECT_GT(stats.recall_plans, 0);
    EXPECT_GT(stats.recall_ms, 0.0);
    EXPECT_GT(stats.selection_ms, 0.0);
    EXPECT_GT(stats.slot_hits, stats.slot_misses);
    EXPECT_EQ(stats.host_waits, 0);  // the device drove every step
    EXPECT_EQ(dense_stats.host_waits, 0);
    for (const int32_t executor : {PULSE_COPY_GATHER, PULSE_COPY_BATCH_DMA, PULSE_COPY_PER_CHUNK}) {
      pulse_engine_stats with;
      EXPECT_EQ(GenerateWith(model, mode, 1 << 20, &with, executor, PULSE_EVICT_SCORE), dense);
      // The baseline executors plan each layer's recall on the host: a wait a layer and step.
      if (executor == PULSE_COPY_GATHER) {
        EXPECT_EQ(with.host_waits, 0);
      } else {
        EXPECT_GT(with.host_waits, 0);
      }
    }
    EXPECT_EQ(stats.staged_requests, 0);
    // A KV cache of 64 tokens, less than the 150-token prompt: the prompt is prefilled staged,
    // in chunks of 40 tokens that read the chunks before them from the host tier.
    pulse_engine_params staged_params = OffloadParams(mode, 1 << 20);
    staged_params.kv_capacity_tokens = 64;
    staged_params.prefill_chunk = 40;
    pulse_engine_stats staged;
    EXPECT_EQ(Generate(model, staged_params, &staged), dense);
    EXPECT_EQ(staged.staged_requests, 1);
    // Chunks 2 to 4 recall the 5, 10 and 15 blocks before them in each of the 2 layers.
    EXPECT_EQ(staged.staged_recall_bytes, (5 + 10 + 15) * 2 * (8 * 2 * 16 * 2 * 4));
    EXPECT_EQ(staged.host_waits, 0);
    pulse_engine_stats small;
    GenerateWith(model, mode, 48, &small);
    EXPECT_GT(small.sparse_picked_blocks, 0);
    EXPECT_LT(small.sparse_attended_tokens, small.sparse_context_tokens / 2);
  }
  pulse_model_free(model);
}

// Boxes of 4 tokens rounded to int8, one box a token rounded to bf16 and to int4, at 32-token
// blocks: the dense tokens with a budget covering the context, and a selection of part of it with
// a small one.
TEST(AbiOffload, EveryEstimatorGenerates) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_params dense_params = OffloadParams(PULSE_OFFLOAD_OFF, 0);
  dense_params.block_tokens = 32;
  pulse_engine_stats dense_stats;
  const std::vector<int32_t> dense = Generate(model, dense_params, &dense_stats);
  for (const auto& [boxes, precision] :
       {std::pair{4, PULSE_SUMMARY_INT8}, std::pair{0, PULSE_SUMMARY_BF16},
        std::pair{0, PULSE_SUMMARY_INT4}}) {
    for (const int32_t budget : {1 << 20, 96}) {
      pulse_engine_params params = OffloadParams(PULSE_OFFLOAD_SOLOHEAD, budget);
      params.block_tokens = 32;
      params.kv_capacity_tokens = 0;
      params.offload_summary_boxes = boxes;
      params.offload_summary_precision = precision;
      pulse_engine_stats stats;
      const std::vector<int32_t> tokens = Generate(model, params, &stats);
      EXPECT_EQ(tokens.size(), dense.size()) << boxes;
      EXPECT_GT(stats.sparse_picked_blocks, 0) << boxes;
      if (budget == 96) {
        EXPECT_LT(stats.sparse_attended_tokens, stats.sparse_context_tokens) << boxes;
      } else {
        EXPECT_EQ(tokens, dense) << boxes;
      }
    }
  }
  pulse_model_free(model);
}

// A request of an offloading engine runs densely or with its own budget when it asks.
TEST(AbiOffload, ARequestChoosesWithinItsEngine) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_stats dense_stats;
  const std::vector<int32_t> dense = GenerateWith(model, PULSE_OFFLOAD_OFF, 0, &dense_stats);
  pulse_engine_params params;
  ASSERT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  params.block_tokens = 8;
  params.offload_mode = PULSE_OFFLOAD_SOLOHEAD;
  params.offload_budget_tokens = 48;
  params.offload_sink_tokens = 8;
  params.offload_window_tokens = 16;
  params.offload_host_tokens = 1024;
  params.offload_slot_tokens = 1024;
  pulse_engine* engine = nullptr;
  ASSERT_EQ(pulse_engine_create(model, &params, &engine), PULSE_OK) << pulse_last_error();
  const std::vector<int32_t> prompt = TinyPrompt(150);
  using Result = std::pair<pulse_status, std::vector<int32_t>>;
  const auto generate = [&](int32_t mode, int32_t budget) -> Result {
    pulse_sampling_params sampling = GreedySampling(12);
    sampling.offload_mode = mode;
    sampling.offload_budget_tokens = budget;
    uint64_t id = 0;
    std::vector<int32_t> tokens(12);
    const pulse_status submitted = pulse_request_submit(engine, prompt.data(), prompt.size(),
                                                        &sampling, nullptr, nullptr, &id);
    if (submitted != PULSE_OK) return {submitted, tokens};
    EXPECT_EQ(pulse_engine_run(engine), PULSE_OK) << pulse_last_error();
    size_t count = 0;
    EXPECT_EQ(pulse_request_result(engine, id, tokens.data(), tokens.size(), &count), PULSE_OK);
    return {PULSE_OK, tokens};
  };
  EXPECT_EQ(generate(PULSE_OFFLOAD_OFF, 0), Result(PULSE_OK, dense));
  EXPECT_EQ(generate(PULSE_OFFLOAD_ENGINE, 1 << 20), Result(PULSE_OK, dense));
  EXPECT_EQ(generate(PULSE_OFFLOAD_SOLOHEAD, 1 << 20), Result(PULSE_OK, dense));
  EXPECT_EQ(generate(PULSE_OFFLOAD_HEADWISE, 0).first, PULSE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pulse_last_error()).find("solohead"), std::string::npos);
  EXPECT_EQ(generate(5, 0).first, PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(generate(PULSE_OFFLOAD_ENGINE, -3).first, PULSE_INVALID_ARGUMENT);
  pulse_engine_free(engine);

  // An engine without offloading refuses a request's selection.
  ASSERT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  ASSERT_EQ(pulse_engine_create(model, &params, &engine), PULSE_OK);
  EXPECT_EQ(generate(PULSE_OFFLOAD_SOLOHEAD, 0).first, PULSE_FAILED_PRECONDITION);
  EXPECT_EQ(generate(PULSE_OFFLOAD_OFF, 0), Result(PULSE_OK, dense));
  pulse_engine_free(engine);
  pulse_model_free(model);
}

TEST(AbiOffload, BadSettingsAreRefused) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_params params;
  ASSERT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  EXPECT_EQ(params.offload_mode, PULSE_OFFLOAD_OFF);
  EXPECT_EQ(params.offload_budget_tokens, 2048);
  pulse_engine* engine = nullptr;
  params.offload_mode = 7;
  EXPECT_TRUE(RefusedNaming(model, params, "offload_mode"));
  params.offload_mode = PULSE_OFFLOAD_SOLOHEAD;
  params.offload_window_tokens = -1;
  EXPECT_EQ(pulse_engine_create(model, &params, &engine), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(engine, nullptr);
  params.offload_window_tokens = 128;
  params.offload_executor = 9;
  EXPECT_TRUE(RefusedNaming(model, params, "offload_executor"));
  params.offload_executor = PULSE_COPY_AUTO;
  params.offload_eviction = -1;
  EXPECT_EQ(pulse_engine_create(model, &params, &engine), PULSE_INVALID_ARGUMENT);
  params.offload_eviction = PULSE_EVICT_LRU;
  params.offload_host_tokens = -5;
  EXPECT_TRUE(RefusedNaming(model, params, "offload_host_tokens"));
  params.offload_host_tokens = 0;
  params.decode_graphs = 2;
  EXPECT_TRUE(RefusedNaming(model, params, "decode_graphs"));
  params.decode_graphs = 1;
  for (const double radius : {-0.25, 1.5, std::nan("")}) {
    params.offload_summary_radius = radius;
    EXPECT_TRUE(RefusedNaming(model, params, "offload_summary_radius")) << radius;
  }
  params.offload_summary_radius = 0;
  for (const int32_t boxes : {-1, 5}) {
    params.offload_summary_boxes = boxes;
    EXPECT_TRUE(RefusedNaming(
        model, params, "pulse_engine_params.offload_summary_boxes is " + std::to_string(boxes)));
  }
  params.offload_summary_boxes = 1;
  for (const int32_t precision : {-1, 4}) {
    params.offload_summary_precision = precision;
    EXPECT_TRUE(RefusedNaming(model, params, "offload_summary_precision")) << precision;
  }
  pulse_model_free(model);
}

// The tiny model over two ranks (threads of the CPU backend, a KV head each) generates the tokens
// it generates over one, dense and offloaded in both modes with a budget that selects, each rank
// writing back and recalling its KV head's half of every block. The engine's statistics are rank
// 0's: SoloHead's picks are every rank's, a set a KV head's rank 0's half.
TEST(AbiTensorParallel, TwoRanksGiveTheOneRankTokens) {
  pulse_model* one = LoadTinyModel();
  pulse_model* two = LoadTinyModel(2);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  for (const int32_t mode : {PULSE_OFFLOAD_OFF, PULSE_OFFLOAD_SOLOHEAD, PULSE_OFFLOAD_HEADWISE}) {
    SCOPED_TRACE(mode);
    pulse_engine_stats one_stats;
    pulse_engine_stats two_stats;
    const std::vector<int32_t> expected = GenerateWith(one, mode, 48, &one_stats);
    EXPECT_EQ(GenerateWith(two, mode, 48, &two_stats), expected);
    if (mode != PULSE_OFFLOAD_OFF) {
      EXPECT_GT(one_stats.recall_bytes, 0);
      EXPECT_EQ(two_stats.writeback_bytes * 2, one_stats.writeback_bytes);
      EXPECT_EQ(two_stats.sparse_picked_blocks * (mode == PULSE_OFFLOAD_SOLOHEAD ? 1 : 2),
                one_stats.sparse_picked_blocks);
    }
  }
  pulse_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(pulse_model_info_get(two, &info), PULSE_OK);
  EXPECT_EQ(info.num_kv_heads, 2);  // the whole model's
  EXPECT_EQ(info.tensor_parallel_size, 2);
  pulse_model_free(two);
  pulse_model_free(one);
}

TEST(AbiTensorParallel, RankCountsTheModelCannotTakeAreRefused) {
  const std::string config = TinyConfigPath();
  const auto load = [&config](int32_t ranks, const char* backend) {
    pulse_model_params params;
    EXPECT_EQ(pulse_model_params_init(&params, sizeof(params)), PULSE_OK);
    params.random_weights = 1;
    params.threads = 1;
    params.backend = backend;
    params.tensor_parallel_size = ranks;
    pulse_model* model = nullptr;
    const pulse_status status = pulse_model_load(config.c_str(), &params, &model);
    EXPECT_EQ(model == nullptr, status != PULSE_OK);
    pulse_model_free(model);
    return status;
  };
  // 2 KV heads: 3 and 4 ranks cannot split them.
  for (const int32_t ranks : {-1, 3, 4, 1000}) {
    EXPECT_EQ(load(ranks, "cpu"), PULSE_INVALID_ARGUMENT) << ranks;
    EXPECT_NE(LastError().find("tensor_parallel_size"), std::string::npos) << LastError();
  }
  EXPECT_EQ(load(2, "cuda"), PULSE_UNSUPPORTED);
  EXPECT_EQ(load(1, "cpu"), PULSE_OK);
}

}  // namespace
