// When sinks run relative to Cancel and Release: an event is delivered only while its request
// exists and was not cancelled, Cancel and Release on another thread wait for the request's sink
// call in progress, and a sink may cancel or release its own request (or another) without
// deadlocking. Each test is a fixed sequence of steps driven by notifications, not by timing.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
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

// How long a sink call keeps running to show that a Cancel or Release on another thread waits
// for it: the test fails (it does not hang) when the call returns sooner.
constexpr std::chrono::milliseconds kHold{200};

// Counts the events a sink receives.
struct Counter {
  std::atomic<int32_t> events{0};
  TokenSink Sink() {
    return [this](const TokenEvent&) {
      ++events;
      return true;
    };
  }
};

class EngineDeliveryTest : public ::testing::Test {
 protected:
  RequestId Submit(int32_t max_tokens, TokenSink sink) {
    const absl::StatusOr<RequestId> id = engine_->Submit(
        Prompt(4, TinyConfig().vocab_size, next_seed_++), Greedy(max_tokens), std::move(sink));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  std::unique_ptr<Engine> engine_ = MakeEngine(TinyModel());
  uint32_t next_seed_ = 1;
};

// Both requests sample their first token in step 1, and the first submitted is delivered first:
// so when `first`'s sink runs, `second` (max_tokens 1) has finished and its last event waits.

TEST_F(EngineDeliveryTest, ReleaseFromAnotherThreadDropsAFinishedEventNotYetDelivered) {
  RequestId second = 0;
  absl::Status released = absl::UnknownError("not called");
  const RequestId first = Submit(2, [&](const TokenEvent& event) {
    if (event.index == 0) {
      // A thread that is not stepping releases `second` while this sink holds up the delivery;
      // it must not wait for this (unrelated) sink call.
      std::thread([&] { released = engine_->Release(second); }).join();
    }
    return true;
  });
  Counter second_events;
  second = Submit(1, second_events.Sink());
  ASSERT_TRUE(engine_->Step().ok());
  EXPECT_TRUE(released.ok()) << released;
  EXPECT_EQ(second_events.events, 0) << "an event of a released request was delivered";
  EXPECT_EQ(engine_->Snapshot(second).status().code(), absl::StatusCode::kNotFound);
  RunToIdle(*engine_);
  EXPECT_EQ(SnapshotOf(*engine_, first).tokens.size(), 2u);
}

TEST_F(EngineDeliveryTest, CancelFromAnotherThreadDropsAFinishedEventNotYetDelivered) {
  RequestId second = 0;
  absl::Status cancelled = absl::UnknownError("not called");
  Submit(2, [&](const TokenEvent& event) {
    if (event.index == 0) std::thread([&] { cancelled = engine_->Cancel(second); }).join();
    return true;
  });
  Counter second_events;
  second = Submit(1, second_events.Sink());
  ASSERT_TRUE(engine_->Step().ok());
  EXPECT_TRUE(cancelled.ok()) << cancelled;
  EXPECT_EQ(second_events.events, 0) << "an event was delivered after Cancel returned";
  // It had finished before the Cancel, which changes nothing but the delivery.
  const RequestSnapshot snapshot = SnapshotOf(*engine_, second);
  EXPECT_EQ(snapshot.reason, FinishReason::kMaxTokens);
  EXPECT_EQ(snapshot.tokens.size(), 1u);
  RunToIdle(*engine_);
  EXPECT_EQ(second_events.events, 0);
  EXPECT_TRUE(engine_->Release(second).ok());
}

// The sink of `id` signals `entered`, then runs on for kHold unless the other thread's call
// returns first; the other thread records whether the sink call had returned when its call did.
struct HeldSink {
  std::promise<void> entered;
  std::promise<void> call_returned;
  std::atomic<bool> sink_returned{false};
  std::atomic<bool> call_returned_during_sink{false};
  std::atomic<int32_t> events{0};

  TokenSink Sink() {
    return [this](const TokenEvent&) {
      if (events++ == 0) {
        entered.set_value();
        const std::future_status waited = call_returned.get_future().wait_for(kHold);
        call_returned_during_sink = waited == std::future_status::ready;
        sink_returned = true;
      }
      return true;
    };
  }
};

TEST_F(EngineDeliveryTest, ReleaseFromAnotherThreadWaitsForTheSinkCallInProgress) {
  HeldSink held;
  const RequestId id = Submit(1, held.Sink());
  absl::Status released = absl::UnknownError("not called");
  bool sink_returned_first = false;
  std::thread releaser([&] {
    held.entered.get_future().wait();
    released = engine_->Release(id);
    sink_returned_first = held.sink_returned;
    held.call_returned.set_value();
  });
  ASSERT_TRUE(engine_->Step().ok());
  releaser.join();
  EXPECT_TRUE(released.ok()) << released;
  EXPECT_TRUE(sink_returned_first) << "Release returned while the request's sink still ran";
  EXPECT_FALSE(held.call_returned_during_sink);
  EXPECT_EQ(held.events, 1);
}

TEST_F(EngineDeliveryTest, CancelFromAnotherThreadWaitsForTheSinkCallInProgress) {
  HeldSink held;
  const RequestId id = Submit(6, held.Sink());
  absl::Status cancelled = absl::UnknownError("not called");
  bool sink_returned_first = false;
  std::thread canceller([&] {
    held.entered.get_future().wait();
    cancelled = engine_->Cancel(id);
    sink_returned_first = held.sink_returned;
    held.call_returned.set_value();
  });
  RunToIdle(*engine_);
  canceller.join();
  EXPECT_TRUE(cancelled.ok()) << cancelled;
  EXPECT_TRUE(sink_returned_first) << "Cancel returned while the request's sink still ran";
  EXPECT_FALSE(held.call_returned_during_sink);
  EXPECT_EQ(held.events, 1);
  const RequestSnapshot snapshot = SnapshotOf(*engine_, id);
  EXPECT_EQ(snapshot.reason, FinishReason::kCancelled);
  EXPECT_EQ(snapshot.tokens.size(), 1u);
}

// Re-entrant calls: from within a sink, on its own request or another, they return at once.

TEST_F(EngineDeliveryTest, SinkCancelsItsOwnRequest) {
  RequestId id = 0;
  int32_t events = 0;
  id = Submit(6, [&](const TokenEvent& event) {
    ++events;
    if (event.index == 1) {
      EXPECT_TRUE(engine_->Cancel(id).ok());
    }
    return true;
  });
  RunToIdle(*engine_);
  EXPECT_EQ(events, 2);
  const RequestSnapshot snapshot = SnapshotOf(*engine_, id);
  EXPECT_EQ(snapshot.reason, FinishReason::kCancelled);
  EXPECT_EQ(snapshot.tokens.size(), 2u);
}

// Stepping from a sink would wait for the step the sink runs in: it is refused, and the request
// still generates all its tokens.
TEST_F(EngineDeliveryTest, SinkThatStepsIsRefusedAndChangesNothing) {
  int32_t events = 0;
  const RequestId id = Submit(3, [&](const TokenEvent&) {
    ++events;
    EXPECT_EQ(engine_->Step().status().code(), absl::StatusCode::kFailedPrecondition);
    return true;
  });
  RunToIdle(*engine_);
  EXPECT_EQ(events, 3);
  EXPECT_EQ(SnapshotOf(*engine_, id).reason, FinishReason::kMaxTokens);
}

TEST_F(EngineDeliveryTest, SinkReleasesItsOwnRequestOnItsLastEvent) {
  RequestId id = 0;
  int32_t events = 0;
  id = Submit(3, [&](const TokenEvent& event) {
    ++events;
    if (event.finished) {
      EXPECT_TRUE(engine_->Release(id).ok());
      EXPECT_EQ(engine_->Snapshot(id).status().code(), absl::StatusCode::kNotFound);
    }
    return true;
  });
  RunToIdle(*engine_);
  EXPECT_EQ(events, 3);
  EXPECT_EQ(engine_->Snapshot(id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineDeliveryTest, SinkCancelsAndReleasesItsOwnRunningRequest) {
  RequestId id = 0;
  int32_t events = 0;
  id = Submit(6, [&](const TokenEvent&) {
    ++events;
    EXPECT_TRUE(engine_->Cancel(id).ok());
    EXPECT_TRUE(engine_->Release(id).ok());
    return false;  // cancelling a released request: moot
  });
  RunToIdle(*engine_);
  EXPECT_EQ(events, 1);
  EXPECT_EQ(engine_->Snapshot(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->stats().kv_blocks_in_use, 0);
}

TEST_F(EngineDeliveryTest, SinkReleasesAnotherRequestWhoseLastEventWaits) {
  RequestId second = 0;
  Submit(2, [&](const TokenEvent& event) {
    if (event.index == 0) {
      EXPECT_TRUE(engine_->Release(second).ok());
    }
    return true;
  });
  Counter second_events;
  second = Submit(1, second_events.Sink());
  RunToIdle(*engine_);
  EXPECT_EQ(second_events.events, 0);
  EXPECT_EQ(engine_->Snapshot(second).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineDeliveryTest, SinkCancelsAnotherRequestWhoseLastEventWaits) {
  RequestId second = 0;
  Submit(2, [&](const TokenEvent& event) {
    if (event.index == 0) {
      EXPECT_TRUE(engine_->Cancel(second).ok());
    }
    return true;
  });
  Counter second_events;
  second = Submit(1, second_events.Sink());
  RunToIdle(*engine_);
  EXPECT_EQ(second_events.events, 0);
  EXPECT_EQ(SnapshotOf(*engine_, second).reason, FinishReason::kMaxTokens);
}

TEST_F(EngineDeliveryTest, SinkReturningFalseOnItsLastEventLeavesItsReason) {
  int32_t events = 0;
  const RequestId id = Submit(1, [&](const TokenEvent&) {
    ++events;
    return false;
  });
  RunToIdle(*engine_);
  EXPECT_EQ(events, 1);
  EXPECT_EQ(SnapshotOf(*engine_, id).reason, FinishReason::kMaxTokens);
}

// A thread releases each request as soon as it finishes, while the step's thread delivers; a
// sink must never run once its request's Release returned.
TEST_F(EngineDeliveryTest, ReleasesRacingWithDeliveriesNeverReachAReleasedSink) {
  constexpr int32_t kRequests = 48;
  struct Slot {
    std::atomic<bool> released{false};
    std::atomic<int32_t> late_events{0};
  };
  std::vector<Slot> slots(kRequests);
  std::vector<RequestId> ids;
  for (int32_t i = 0; i < kRequests; ++i) {
    ids.push_back(Submit(1 + i % 4, [&slots, i](const TokenEvent&) {
      // Released before the call began, or while it ran.
      if (slots[i].released) ++slots[i].late_events;
      std::this_thread::yield();
      if (slots[i].released) ++slots[i].late_events;
      return true;
    }));
  }
  std::thread releaser([&] {
    for (int32_t done = 0; done < kRequests;) {
      for (int32_t i = 0; i < kRequests; ++i) {
        if (slots[i].released) continue;
        const absl::Status status = engine_->Release(ids[i]);
        if (status.ok()) {
          slots[i].released = true;
          ++done;
        } else {
          ASSERT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
        }
      }
      std::this_thread::yield();
    }
  });
  RunToIdle(*engine_);
  releaser.join();
  for (int32_t i = 0; i < kRequests; ++i) EXPECT_EQ(slots[i].late_events, 0) << i;
}

}  // namespace
}  // namespace pulse
