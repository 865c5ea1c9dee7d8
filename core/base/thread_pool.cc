#include "core/base/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace pulse {
namespace {

// The pool whose loop the current thread is running, if any; a ParallelFor on that pool from
// here runs inline instead of waiting for itself.
thread_local const ThreadPool* current_pool = nullptr;

class ScopedCurrentPool {
 public:
  explicit ScopedCurrentPool(const ThreadPool* pool) : saved_(current_pool) { current_pool = pool; }
  ~ScopedCurrentPool() { current_pool = saved_; }

 private:
  const ThreadPool* saved_;
};

int32_t ResolveThreads(int32_t threads) {
  if (threads > 0) return threads;
  return std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
}

}  // namespace

struct ThreadPool::Loop {
  absl::FunctionRef<void(int64_t, int64_t)> fn;
  int64_t n;
  int64_t chunk;
  std::atomic<int64_t> next{0};
};

ThreadPool::ThreadPool(int32_t threads) : num_threads_(ResolveThreads(threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int32_t i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerMain(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::RunRanges(Loop& loop) {
  for (;;) {
    const int64_t begin = loop.next.fetch_add(loop.chunk, std::memory_order_relaxed);
    if (begin >= loop.n) return;
    loop.fn(begin, std::min(loop.n, begin + loop.chunk));
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  // A few ranges per thread so that a slow thread does not hold up the others.
  const int64_t chunk = std::max(grain, (n + 4 * num_threads_ - 1) / (4 * num_threads_));
  if (workers_.empty() || chunk >= n || current_pool == this) {
    fn(0, n);
    return;
  }

  absl::MutexLock submit_lock(&submit_mu_);
  ScopedCurrentPool scoped(this);
  Loop loop{fn, n, chunk};
  {
    absl::MutexLock lock(&mu_);
    loop_ = &loop;
    ++generation_;
  }
  RunRanges(loop);
  // Every range is claimed now; wait for the workers still running one, then retire the loop so
  // that a worker waking late does not touch it.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int32_t* busy) { return *busy == 0; }, &busy_workers_));
  loop_ = nullptr;
}

void ThreadPool::WorkerMain() {
  ScopedCurrentPool scoped(this);
  uint64_t seen_generation = 0;
  for (;;) {
    Loop* loop;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (loop_ != nullptr && generation_ != seen_generation);
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      seen_generation = generation_;
      loop = loop_;
      ++busy_workers_;
    }
    RunRanges(*loop);
    absl::MutexLock lock(&mu_);
    --busy_workers_;
  }
}

}  // namespace pulse
