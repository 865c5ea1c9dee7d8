#include "core/base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

struct Range {
  int64_t begin;
  int64_t end;
};

// Runs one ParallelFor and returns the ranges it produced, sorted.
std::vector<Range> CollectRanges(ThreadPool& pool, int64_t n, int64_t grain) {
  std::mutex mu;
  std::vector<Range> ranges;
  pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mu);
    ranges.push_back({begin, end});
  });
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  return ranges;
}

TEST(ThreadPoolTest, DefaultUsesHardwareThreads) {
  ThreadPool pool;
  EXPECT_EQ(pool.num_threads(),
            std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency())));
}

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnceInGrainSizedRanges) {
  for (int32_t threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 100003}) {
      for (int64_t grain : {1, 3, 64, 5000}) {
        SCOPED_TRACE(testing::Message()
                     << "threads " << threads << " n " << n << " grain " << grain);
        const std::vector<Range> ranges = CollectRanges(pool, n, grain);
        ASSERT_FALSE(ranges.empty());
        EXPECT_EQ(ranges.front().begin, 0);
        EXPECT_EQ(ranges.back().end, n);
        for (size_t i = 0; i < ranges.size(); ++i) {
          EXPECT_LT(ranges[i].begin, ranges[i].end);
          if (i + 1 < ranges.size()) {
            EXPECT_EQ(ranges[i].end, ranges[i + 1].begin);
            EXPECT_GE(ranges[i].end - ranges[i].begin, grain);
          }
        }
      }
    }
  }
}

TEST(ThreadPoolTest, EmptyLoopCallsNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  pool.ParallelFor(-5, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPoolTest, RunsOnSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<int> arrived{0};
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Each of the two ranges waits for the other, so they must run on two threads at once.
  pool.ParallelFor(2, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPoolTest, NestedCallRunsInline) {
  ThreadPool pool(3);
  constexpr int64_t kOuter = 64;
  constexpr int64_t kInner = 50;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  pool.ParallelFor(kOuter, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int calls = 0;
      pool.ParallelFor(kInner, 1, [&](int64_t inner_begin, int64_t inner_end) {
        ++calls;
        for (int64_t j = inner_begin; j < inner_end; ++j) hits[i * kInner + j].fetch_add(1);
      });
      EXPECT_EQ(calls, 1);
    }
  });
  for (const std::atomic<int>& hit : hits) EXPECT_EQ(hit.load(), 1);
}

TEST(ThreadPoolTest, ConcurrentCallersEachGetTheirWholeLoop) {
  ThreadPool pool(2);
  constexpr int kCallers = 4;
  constexpr int kLoops = 200;
  constexpr int64_t kN = 1000;
  std::vector<std::thread> callers;
  std::vector<int64_t> bad_loops(kCallers, 0);
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int loop = 0; loop < kLoops; ++loop) {
        std::vector<std::atomic<int>> hits(kN);
        pool.ParallelFor(kN, 7, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        if (!std::all_of(hits.begin(), hits.end(),
                         [](const std::atomic<int>& h) { return h.load() == 1; })) {
          ++bad_loops[c];
        }
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(bad_loops[c], 0) << "caller " << c;
}

}  // namespace
}  // namespace pulse
