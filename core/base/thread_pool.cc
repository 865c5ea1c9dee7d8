#include "core/base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>

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

// How long a thread spins for the next loop, or for the workers to finish one, before sleeping.
constexpr auto kSpin = std::chrono::microseconds(200);

// Spins until done() or kSpin has passed; returns done().
template <typename Done>
bool SpinUntil(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

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
  stopping_.store(true);
  Wake();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::Wake() {
  // A sleeper re-checks its condition when the mutex is released.
  if (sleepers_.load() > 0) absl::MutexLock lock(&mu_);
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
  loop_.store(&loop);
  generation_.fetch_add(1);
  Wake();
  RunRanges(loop);
  // Every range is claimed now. Retire the loop, then wait for the workers that took it: a worker
  // counts itself busy before it reads loop_ (both sequentially consistent), so once busy_ is 0
  // after the retirement no worker can still touch the loop.
  loop_.store(nullptr);
  const auto idle = [this] { return busy_.load() == 0; };
  if (SpinUntil(idle)) return;
  sleepers_.fetch_add(1);
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&idle));
  }
  sleepers_.fetch_sub(1);
}

void ThreadPool::WorkerMain() {
  ScopedCurrentPool scoped(this);
  uint64_t seen_generation = 0;
  const auto ready = [&] { return stopping_.load() || generation_.load() != seen_generation; };
  for (;;) {
    if (!SpinUntil(ready)) {
      sleepers_.fetch_add(1);
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(&ready));
      }
      sleepers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen_generation = generation_.load();
    busy_.fetch_add(1);
    if (Loop* loop = loop_.load(); loop != nullptr) RunRanges(*loop);
    busy_.fetch_sub(1);
    Wake();  // the caller may sleep until busy_ is 0
  }
}

}  // namespace pulse
