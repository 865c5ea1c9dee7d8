// The CPU backend's copy engine: one thread that runs copy plans (a memcpy a chunk, or a function
// that moves and converts data, as the fp8 host tier's encoding and decoding) in the order they
// were enqueued, each that moves data after an injected delay (a test option: recall that lands
// late).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/backend/copy_plan.h"
#include "core/base/status.h"

namespace pulse::cpu {

class CopyThread {
 public:
  using Clock = std::chrono::steady_clock;
  // A plan's completion, shared by the queue and whoever waits for the plan.
  struct Completion;

  // For tests: `fault`, when set, is asked with each data-moving plan's index (0, 1, ... in
  // enqueue order) and a true answer fails that plan: nothing of it is copied, and waiting for
  // it reports the failure.
  using Fault = std::function<bool(int64_t plan)>;

  CopyThread(absl::Duration delay_per_plan, Fault fault);
  CopyThread(const CopyThread&) = delete;
  CopyThread& operator=(const CopyThread&) = delete;
  // Runs the plans still queued, then stops.
  ~CopyThread();

  // Queues a copy of `chunks` (the list is copied; the memory it names must stay allocated).
  std::shared_ptr<const Completion> Enqueue(std::span<const CopyChunk> chunks);
  // Queues a plan that moves data by running `move` on the copy thread (its fault and delay as a
  // copy's).
  std::shared_ptr<const Completion> EnqueueMove(std::function<void()> move);
  // When the plan of `completion` completed; nullopt while it has not.
  std::optional<Clock::time_point> CompletedAt(const Completion& completion) const;
  // Blocks until it has completed; Internal when the plan failed.
  absl::Status Wait(const Completion& completion) const;

 private:
  struct Plan;

  void Main();

  const absl::Duration delay_;
  const Fault fault_;
  int64_t data_plans_ ABSL_GUARDED_BY(mu_) = 0;  // enqueued so far, for fault_
  mutable absl::Mutex mu_;
  std::deque<Plan> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pulse::cpu
