// A fixed set of worker threads that run data-parallel loops with the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace pulse {

class ThreadPool {
 public:
  // `threads` is the parallelism of ParallelFor including the calling thread, so the pool starts
  // threads - 1 workers; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int32_t threads = 0);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int32_t num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n) exactly once, each range at least
  // `grain` long (but the last), and returns when all calls have returned. The caller runs ranges
  // too. Calls from several threads at once run one after another; a call from inside fn (on any
  // thread of this loop) runs fn(0, n) inline. Callers must not depend on how [0, n) is split.
  //
  // Between loops the workers, and the caller waiting for them, spin for a short while before
  // sleeping on the mutex: a decode step runs hundreds of loops of a few microseconds, and waking
  // a sleeping thread costs more than most of them.
  void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  struct Loop;

  void WorkerMain();
  // Claims and runs ranges of `loop` until none is left.
  static void RunRanges(Loop& loop);
  // Lets the threads sleeping on mu_ re-check what they wait for.
  void Wake();

  const int32_t num_threads_;
  absl::Mutex submit_mu_;  // held by the one caller whose loop is running
  // Only for sleeping: the loop's state is in the atomics, sequentially consistent.
  absl::Mutex mu_;
  std::atomic<Loop*> loop_{nullptr};
  std::atomic<uint64_t> generation_{0};  // loops published
  std::atomic<int32_t> busy_{0};         // workers that may be running the current loop
  std::atomic<int32_t> sleepers_{0};     // threads sleeping on mu_, or about to
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

}  // namespace pulse
