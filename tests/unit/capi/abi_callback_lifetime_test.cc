// How long a token callback's user_data must live, through the ABI: a callback runs only while
// its request exists and was not cancelled, pulse_request_cancel and pulse_request_release on
// another thread wait for that request's callback in progress, and a callback may cancel or
// release its own request or another without deadlocking. The tests are fixed sequences driven
// by promises and joins, not by timing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "pulseinfer/pulseinfer.h"
#include "tiny_model.h"

namespace {

using pulse::capi_test::CreateTinyEngine;
using pulse::capi_test::GreedySampling;
using pulse::capi_test::LoadTinyModel;
using pulse::capi_test::TinyPrompt;

// How long a callback keeps running to show that a cancel or release on another thread waits for
// it: the test fails (it does not hang) when that call returns sooner.
constexpr std::chrono::milliseconds kHold{200};

// A callback's user_data that knows when the caller would have freed it: `freed` is set once
// the cancel or release that allows freeing it returned, and every later call is counted.
struct Watched {
  std::atomic<bool> freed{false};
  std::atomic<int> events{0};
  std::atomic<int> after_free{0};
};

int WatchedCallback(void* user_data, const pulse_token_event* /*event*/) {
  auto* watched = static_cast<Watched*>(user_data);
  // Freed before the call began, or while it ran.
  if (watched->freed) ++watched->after_free;
  ++watched->events;
  std::this_thread::yield();
  if (watched->freed) ++watched->after_free;
  return 0;
}

class AbiCallbackLifetime : public testing::Test {
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

  uint64_t Submit(int max_tokens, pulse_token_callback callback, void* user_data) {
    const std::vector<int32_t> prompt = TinyPrompt(6);
    const pulse_sampling_params sampling = GreedySampling(max_tokens);
    uint64_t id = 0;
    EXPECT_EQ(pulse_request_submit(engine_, prompt.data(), prompt.size(), &sampling, callback,
                                   user_data, &id),
              PULSE_OK)
        << pulse_last_error();
    return id;
  }

  pulse_request_stats Stats(uint64_t id) {
    pulse_request_stats stats;
    stats.struct_size = sizeof(stats);
    EXPECT_EQ(pulse_request_stats_get(engine_, id, &stats), PULSE_OK) << pulse_last_error();
    return stats;
  }

  pulse_model* model_ = nullptr;
  pulse_engine* engine_ = nullptr;
};

// A callback that, on its request's first event, makes another thread call `action` on
// `target` and joins it (so the event's delivery is held up while the other thread runs).
struct OnFirstEvent {
  pulse_engine* engine = nullptr;
  pulse_status (*action)(pulse_engine*, uint64_t) = nullptr;
  uint64_t target = 0;
  Watched* target_data = nullptr;  // marked freed when the action returns OK
  pulse_status status = PULSE_INTERNAL;
  bool done = false;
};

int ActOnFirstEvent(void* user_data, const pulse_token_event* /*event*/) {
  auto* act = static_cast<OnFirstEvent*>(user_data);
  if (!act->done) {
    act->done = true;
    std::thread([act] {
      act->status = act->action(act->engine, act->target);
      if (act->status == PULSE_OK) act->target_data->freed = true;
    }).join();
  }
  return 0;
}

// Both requests sample their first token in the first step, the first submitted delivered
// first: when A's callback runs, B (max_tokens 1) has finished and its last event waits.

TEST_F(AbiCallbackLifetime, ReleaseFromAnotherThreadDropsAFinishedEventNotYetDelivered) {
  OnFirstEvent act{.engine = engine_, .action = pulse_request_release};
  Watched b;
  Submit(2, ActOnFirstEvent, &act);
  act.target = Submit(1, WatchedCallback, &b);
  act.target_data = &b;
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  EXPECT_EQ(act.status, PULSE_OK);
  EXPECT_EQ(b.after_free, 0) << "the callback ran after pulse_request_release returned";
  EXPECT_EQ(b.events, 0);
  pulse_request_stats stats;
  stats.struct_size = sizeof(stats);
  EXPECT_EQ(pulse_request_stats_get(engine_, act.target, &stats), PULSE_NOT_FOUND);
}

TEST_F(AbiCallbackLifetime, CancelFromAnotherThreadDropsAFinishedEventNotYetDelivered) {
  OnFirstEvent act{.engine = engine_, .action = pulse_request_cancel};
  Watched b;
  Submit(2, ActOnFirstEvent, &act);
  act.target = Submit(1, WatchedCallback, &b);
  act.target_data = &b;
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  EXPECT_EQ(act.status, PULSE_OK);
  EXPECT_EQ(b.after_free, 0) << "the callback ran after pulse_request_cancel returned";
  EXPECT_EQ(b.events, 0);
  // It finished before the cancel, which only dropped its event.
  EXPECT_EQ(Stats(act.target).finish_reason, PULSE_FINISH_MAX_TOKENS);
  size_t count = 0;
  EXPECT_EQ(pulse_request_result(engine_, act.target, nullptr, 0, &count), PULSE_OK);
  EXPECT_EQ(count, 1u);
}

// A callback that signals `entered` on its first event, then runs on for kHold unless the other
// thread's call returns first.
struct Held {
  std::promise<void> entered;
  std::promise<void> call_returned;
  std::atomic<bool> callback_returned{false};
  std::atomic<bool> call_returned_during_callback{false};
  std::atomic<int> events{0};
};

int HeldCallback(void* user_data, const pulse_token_event* /*event*/) {
  auto* held = static_cast<Held*>(user_data);
  if (held->events++ == 0) {
    held->entered.set_value();
    held->call_returned_during_callback =
        held->call_returned.get_future().wait_for(kHold) == std::future_status::ready;
    held->callback_returned = true;
  }
  return 0;
}

// Calls `action` on request `id` from another thread once its callback has been entered; returns
// the status, and whether the callback had returned by then.
struct WaitCheck {
  pulse_status status = PULSE_INTERNAL;
  bool callback_returned_first = false;
};

TEST_F(AbiCallbackLifetime, ReleaseFromAnotherThreadWaitsForTheCallbackInProgress) {
  Held held;
  const uint64_t id = Submit(1, HeldCallback, &held);
  WaitCheck check;
  std::thread releaser([&] {
    held.entered.get_future().wait();
    check.status = pulse_request_release(engine_, id);
    check.callback_returned_first = held.callback_returned;
    held.call_returned.set_value();
  });
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  releaser.join();
  EXPECT_EQ(check.status, PULSE_OK);
  EXPECT_TRUE(check.callback_returned_first)
      << "pulse_request_release returned while the request's callback still ran";
  EXPECT_FALSE(held.call_returned_during_callback);
  EXPECT_EQ(held.events, 1);
}

TEST_F(AbiCallbackLifetime, CancelFromAnotherThreadWaitsForTheCallbackInProgress) {
  Held held;
  const uint64_t id = Submit(6, HeldCallback, &held);
  WaitCheck check;
  std::thread canceller([&] {
    held.entered.get_future().wait();
    check.status = pulse_request_cancel(engine_, id);
    check.callback_returned_first = held.callback_returned;
    held.call_returned.set_value();
  });
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  canceller.join();
  EXPECT_EQ(check.status, PULSE_OK);
  EXPECT_TRUE(check.callback_returned_first)
      << "pulse_request_cancel returned while the request's callback still ran";
  EXPECT_FALSE(held.call_returned_during_callback);
  EXPECT_EQ(held.events, 1);
  EXPECT_EQ(Stats(id).finish_reason, PULSE_FINISH_CANCELLED);
}

// Re-entrant calls from a callback, on its own request or another: they return at once.
struct ReEntrant {
  pulse_engine* engine = nullptr;
  uint64_t self = 0;
  uint64_t other = 0;
  int at_index = 0;
  bool cancel_self = false;
  bool release_self = false;
  bool release_self_when_finished = false;
  bool cancel_other = false;
  bool release_other = false;
  std::vector<pulse_status> statuses = {};
  int events = 0;
};

int ReEntrantCallback(void* user_data, const pulse_token_event* event) {
  auto* re = static_cast<ReEntrant*>(user_data);
  ++re->events;
  if (event->index == re->at_index) {
    if (re->cancel_self) re->statuses.push_back(pulse_request_cancel(re->engine, re->self));
    if (re->release_self) re->statuses.push_back(pulse_request_release(re->engine, re->self));
    if (re->cancel_other) re->statuses.push_back(pulse_request_cancel(re->engine, re->other));
    if (re->release_other) re->statuses.push_back(pulse_request_release(re->engine, re->other));
  }
  if (event->finished && re->release_self_when_finished) {
    re->statuses.push_back(pulse_request_release(re->engine, re->self));
  }
  return 0;
}

TEST_F(AbiCallbackLifetime, CallbackCancelsItsOwnRequest) {
  ReEntrant re{.engine = engine_, .at_index = 1, .cancel_self = true};
  re.self = Submit(6, ReEntrantCallback, &re);
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  EXPECT_EQ(re.statuses, std::vector<pulse_status>{PULSE_OK});
  EXPECT_EQ(re.events, 2);
  EXPECT_EQ(Stats(re.self).finish_reason, PULSE_FINISH_CANCELLED);
}

TEST_F(AbiCallbackLifetime, CallbackReleasesItsOwnRequestOnItsLastEvent) {
  ReEntrant re{.engine = engine_, .at_index = -1, .release_self_when_finished = true};
  re.self = Submit(3, ReEntrantCallback, &re);
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  EXPECT_EQ(re.statuses, std::vector<pulse_status>{PULSE_OK});
  EXPECT_EQ(re.events, 3);
  EXPECT_EQ(pulse_request_cancel(engine_, re.self), PULSE_NOT_FOUND);
}

TEST_F(AbiCallbackLifetime, CallbackCancelsAndReleasesItsOwnRunningRequest) {
  ReEntrant re{.engine = engine_, .at_index = 0, .cancel_self = true, .release_self = true};
  re.self = Submit(6, ReEntrantCallback, &re);
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  EXPECT_EQ(re.statuses, (std::vector<pulse_status>{PULSE_OK, PULSE_OK}));
  EXPECT_EQ(re.events, 1);
  EXPECT_EQ(pulse_request_cancel(engine_, re.self), PULSE_NOT_FOUND);
}

TEST_F(AbiCallbackLifetime, CallbackReleasesAnotherRequestWhoseLastEventWaits) {
  ReEntrant re{.engine = engine_, .at_index = 0, .release_other = true};
  Watched b;
  re.self = Submit(2, ReEntrantCallback, &re);
  re.other = Submit(1, WatchedCallback, &b);
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  EXPECT_EQ(re.statuses, std::vector<pulse_status>{PULSE_OK});
  EXPECT_EQ(b.events, 0);
  EXPECT_EQ(pulse_request_cancel(engine_, re.other), PULSE_NOT_FOUND);
}

TEST_F(AbiCallbackLifetime, CallbackCancelsAnotherRequestWhoseLastEventWaits) {
  ReEntrant re{.engine = engine_, .at_index = 0, .cancel_other = true};
  Watched b;
  re.self = Submit(2, ReEntrantCallback, &re);
  re.other = Submit(1, WatchedCallback, &b);
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  EXPECT_EQ(re.statuses, std::vector<pulse_status>{PULSE_OK});
  EXPECT_EQ(b.events, 0);
  EXPECT_EQ(Stats(re.other).finish_reason, PULSE_FINISH_MAX_TOKENS);
}

// A binding's pattern: another thread releases each request as soon as it has finished and then
// frees its user_data (here: marks it freed); no callback may run on freed user_data.
TEST_F(AbiCallbackLifetime, ReleasesRacingWithCallbacksNeverReachFreedUserData) {
  constexpr int kRequests = 32;
  std::vector<Watched> data(kRequests);
  std::vector<uint64_t> ids;
  for (int i = 0; i < kRequests; ++i) ids.push_back(Submit(1 + i % 4, WatchedCallback, &data[i]));
  std::thread releaser([&] {
    for (int done = 0; done < kRequests;) {
      for (int i = 0; i < kRequests; ++i) {
        if (data[i].freed) continue;
        const pulse_status status = pulse_request_release(engine_, ids[i]);
        if (status == PULSE_OK) {
          data[i].freed = true;
          ++done;
        } else {
          ASSERT_EQ(status, PULSE_FAILED_PRECONDITION) << pulse_last_error();
        }
      }
      std::this_thread::yield();
    }
  });
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << pulse_last_error();
  releaser.join();
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(data[i].after_free, 0) << i;
}

}  // namespace
