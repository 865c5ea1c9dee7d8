#include "core/backend/cpu/copy_thread.h"

#include <cstring>
#include <utility>
#include <vector>

namespace pulse::cpu {

struct CopyThread::Completion {
  // Guarded by the CopyThread's mu_.
  std::optional<Clock::time_point> completed_at;
  bool failed = false;
};

struct CopyThread::Plan {
  std::function<void()> move;  // empty: a marker
  std::shared_ptr<Completion> completion;
  bool fail = false;
  int64_t index = -1;  // among the plans that move data
};

CopyThread::CopyThread(absl::Duration delay_per_plan, Fault fault)
    : delay_(delay_per_plan), fault_(std::move(fault)), thread_([this] { Main(); }) {}

CopyThread::~CopyThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::shared_ptr<const CopyThread::Completion> CopyThread::Enqueue(
    std::span<const CopyChunk> chunks) {
  if (chunks.empty()) return EnqueueMove(nullptr);
  return EnqueueMove([chunks = std::vector<CopyChunk>(chunks.begin(), chunks.end())] {
    for (const CopyChunk& chunk : chunks) std::memcpy(chunk.dst, chunk.src, chunk.bytes);
  });
}

std::shared_ptr<const CopyThread::Completion> CopyThread::EnqueueMove(std::function<void()> move) {
  auto completion = std::make_shared<Completion>();
  absl::MutexLock lock(&mu_);
  Plan plan{std::move(move), completion};
  if (plan.move) {
    plan.index = data_plans_++;
    plan.fail = fault_ && fault_(plan.index);
  }
  queue_.push_back(std::move(plan));
  return completion;
}

std::optional<CopyThread::Clock::time_point> CopyThread::CompletedAt(
    const Completion& completion) const {
  absl::MutexLock lock(&mu_);
  return completion.completed_at;
}

absl::Status CopyThread::Wait(const Completion& completion) const {
  absl::MutexLock lock(&mu_);
  const auto done = [&completion]() { return completion.completed_at.has_value(); };
  mu_.Await(absl::Condition(&done));
  if (completion.failed) return absl::InternalError("CPU backend: a copy plan failed (injected)");
  return absl::OkStatus();
}

void CopyThread::Main() {
  for (;;) {
    Plan plan;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;
      plan = std::move(queue_.front());
      queue_.pop_front();
    }
    // A marker (a plan that moves nothing) costs a real copy engine nothing: only copies land late.
    if (plan.move) absl::SleepFor(delay_);
    if (plan.move && !plan.fail) plan.move();
    absl::MutexLock lock(&mu_);
    plan.completion->failed = plan.fail;
    plan.completion->completed_at = Clock::now();
  }
}

}  // namespace pulse::cpu
