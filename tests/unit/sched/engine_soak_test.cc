// A soak: client threads against one engine stepped by a thread of its own, submitting requests
// of random prompts, lengths and sampling, cancelling some (from the client or from their own
// sink) and polling snapshots, while memory pressure moves requests between the tiers (an
// offloading engine whose budget covers every context, so placement changes no token). Then
// every stream is checked: events numbered 0, 1, 2... with none lost or duplicated, each the
// token the snapshot holds, and the tokens those the same request gives alone (a prefix of them
// when cancelled). Its size comes from PULSE_SOAK_REQUESTS and PULSE_SOAK_THREADS (default 240
// requests from 4 threads; scripts/soak runs 10,000 from 8 under AddressSanitizer), and it
// prints the step time's median and 99th percentile.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "core/sched/engine.h"
#include "gtest/gtest.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::MakeEngine;
using ::pulse::testing::Prompt;
using ::pulse::testing::SnapshotOf;
using ::pulse::testing::TinyConfig;
using ::pulse::testing::TinyModel;

int32_t FromEnvironment(const char* name, int32_t fallback) {
  const char* value = std::getenv(name);
  return value == nullptr ? fallback : std::max(1, std::atoi(value));
}

EngineOptions SoakOptions() {
  return {.max_batch = 8,
          .prefill_chunk = 16,
          .max_step_tokens = 64,
          .block_tokens = 4,
          .kv_capacity_tokens = 320,
          .offload = OffloadConfig{
              .selection = {.budget_tokens = 256, .sink_tokens = 4, .window_tokens = 8},
              .host_tokens = 8 * 256,
              .slot_tokens = 8 * 256}};
}

// One request of the soak: what it asked and what it saw.
struct Job {
  std::vector<int32_t> prompt;
  SamplingParams params;
  int32_t cancel_after = -1;  // tokens; -1: never
  bool cancel_in_sink = false;
  std::atomic<bool> cancel_called{false};
  RequestId id = 0;
  absl::Mutex mu;
  std::vector<TokenEvent> events ABSL_GUARDED_BY(mu);
};

void MakeJob(std::mt19937& random, uint32_t seed, Job& job) {
  job.prompt = Prompt(1 + static_cast<int32_t>(random() % 60), TinyConfig().vocab_size, seed);
  job.params = testing::Greedy(1 + static_cast<int32_t>(random() % 24), random() % 2 == 0);
  if (random() % 2 == 0) {
    job.params.temperature = 0.8f;
    job.params.top_k = static_cast<int32_t>(random() % 20);
    job.params.seed = seed;
  }
  if (random() % 5 == 0) job.params.stop_token_ids = {static_cast<int32_t>(random() % 101)};
  if (random() % 6 == 0) {
    job.cancel_after = static_cast<int32_t>(random() % 8);
    job.cancel_in_sink = random() % 2 == 0;
  }
}

TEST(EngineSoakTest, NoTokenIsLostOrDuplicatedUnderLoad) {
  const int32_t requests = FromEnvironment("PULSE_SOAK_REQUESTS", 240);
  const int32_t threads = FromEnvironment("PULSE_SOAK_THREADS", 4);
  std::shared_ptr<const Model> model = TinyModel();
  std::unique_ptr<Engine> engine = MakeEngine(model, SoakOptions());
  std::vector<std::unique_ptr<Job>> jobs(static_cast<size_t>(requests));
  for (auto& job : jobs) job = std::make_unique<Job>();

  std::atomic<int32_t> submitted{0};
  std::atomic<bool> clients_done{false};
  std::vector<double> step_ms;
  std::thread stepper([&] {
    while (!clients_done || engine->pending() > 0) {
      const auto start = std::chrono::steady_clock::now();
      const absl::StatusOr<StepReport> report = engine->Step();
      ASSERT_TRUE(report.ok()) << report.status();
      if (report->scheduled > 0) {
        step_ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
      } else {
        std::this_thread::yield();
      }
    }
  });
  std::vector<std::thread> clients;
  for (int32_t t = 0; t < threads; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 random(static_cast<uint32_t>(1000 + t));
      for (int32_t i = t; i < requests; i += threads) {
        Job& job = *jobs[static_cast<size_t>(i)];
        MakeJob(random, static_cast<uint32_t>(i + 1), job);
        Job* self = &job;
        Engine* engine_ptr = engine.get();
        absl::StatusOr<RequestId> id =
            engine->Submit(job.prompt, job.params, [self, engine_ptr](const TokenEvent& event) {
              absl::MutexLock lock(&self->mu);
              self->events.push_back(event);
              if (self->cancel_in_sink && event.index == self->cancel_after) {
                self->cancel_called = true;
                EXPECT_TRUE(engine_ptr->Cancel(event.id).ok());
              }
              return true;
            });
        ASSERT_TRUE(id.ok()) << id.status();
        job.id = *id;
        ++submitted;
        if (job.cancel_after >= 0 && !job.cancel_in_sink) {
          // Cancel from this thread once it has about that many tokens (or it finished).
          for (;;) {
            const RequestSnapshot snapshot = SnapshotOf(*engine, job.id);
            if (snapshot.state == RequestState::kFinished ||
                static_cast<int32_t>(snapshot.tokens.size()) >= job.cancel_after) {
              break;
            }
            std::this_thread::yield();
          }
          job.cancel_called = true;
          EXPECT_TRUE(engine->Cancel(job.id).ok());
        }
        if (random() % 4 == 0) (void)engine->Snapshot(jobs[random() % (i + 1)]->id);
        // Keep a few dozen requests in flight: enough to press on memory, not the whole queue.
        while (engine->pending() > 48) std::this_thread::yield();
      }
    });
  }
  for (std::thread& client : clients) client.join();
  clients_done = true;
  stepper.join();
  ASSERT_EQ(submitted, requests);

  std::unique_ptr<Engine> alone = MakeEngine(model, SoakOptions());
  int32_t cancelled = 0;
  for (const std::unique_ptr<Job>& job : jobs) {
    SCOPED_TRACE(job->id);
    const RequestSnapshot snapshot = SnapshotOf(*engine, job->id);
    ASSERT_EQ(snapshot.state, RequestState::kFinished);
    ASSERT_TRUE(snapshot.error.ok()) << snapshot.error;
    const RequestId reference_id = *alone->Submit(job->prompt, job->params, nullptr);
    testing::RunToIdle(*alone);
    const std::vector<int32_t> reference = SnapshotOf(*alone, reference_id).tokens;
    ASSERT_TRUE(alone->Release(reference_id).ok());
    absl::MutexLock lock(&job->mu);
    // Events: numbered from 0 without gap or repeat, each the snapshot's token at its index,
    // only the last one finished, and only as the request's last token.
    for (size_t e = 0; e < job->events.size(); ++e) {
      const TokenEvent& event = job->events[e];
      ASSERT_EQ(event.index, static_cast<int32_t>(e));
      ASSERT_LT(e, snapshot.tokens.size());
      ASSERT_EQ(event.token, snapshot.tokens[e]);
      if (event.finished) {
        ASSERT_EQ(e + 1, job->events.size());
        ASSERT_EQ(e + 1, snapshot.tokens.size());
      }
    }
    if (job->cancel_called) {
      // Cancelled (or finished just before): its tokens are the start of the request's, and the
      // events not delivered by then are dropped.
      ++cancelled;
      ASSERT_LE(snapshot.tokens.size(), reference.size());
      ASSERT_TRUE(std::equal(snapshot.tokens.begin(), snapshot.tokens.end(), reference.begin()));
    } else {
      ASSERT_NE(snapshot.reason, FinishReason::kCancelled);
      ASSERT_EQ(job->events.size(), snapshot.tokens.size());
      ASSERT_TRUE(job->events.back().finished);
      ASSERT_EQ(snapshot.tokens, reference);
    }
    ASSERT_TRUE(engine->Release(job->id).ok());
  }
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.kv_blocks_in_use, 0);
  EXPECT_EQ(stats.host_blocks_in_use, 0);
  EXPECT_EQ(stats.slot_blocks_in_use, 0);
  std::sort(step_ms.begin(), step_ms.end());
  const auto at = [&step_ms](double q) {
    return step_ms.empty() ? 0.0 : step_ms[static_cast<size_t>(q * (step_ms.size() - 1))];
  };
  std::printf(
      "soak: %d requests from %d threads, %d cancelled; %zu steps, step time p50 %.3f ms, p99 "
      "%.3f ms; %lld admitted offloaded, %lld demoted, %lld promoted\n",
      requests, threads, cancelled, step_ms.size(), at(0.5), at(0.99),
      static_cast<long long>(stats.admission.offloaded),
      static_cast<long long>(stats.admission.demoted),
      static_cast<long long>(stats.admission.promoted));
}

}  // namespace
}  // namespace pulse
