// The in-process collectives: where each rank's rows land in an all-gather, sums in rank order
// whatever the threads' timing, and an abort that frees every rank waiting in a collective.
#include "core/backend/cpu/thread_communicator.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

// Runs body(rank) for each of the communicators' ranks on a thread of its own.
template <typename Body>
void OnRanks(std::vector<std::unique_ptr<Communicator>>& ranks, Body body) {
  std::vector<std::thread> threads;
  threads.reserve(ranks.size());
  for (auto& rank : ranks) threads.emplace_back([&body, &rank] { body(*rank); });
  for (std::thread& thread : threads) thread.join();
}

TEST(ThreadCommunicatorTest, AllGatherLaysEachRanksRowsSideBySide) {
  constexpr int32_t kRanks = 3;
  constexpr int64_t kRows = 4;
  constexpr int64_t kCols = 5;
  std::vector<std::unique_ptr<Communicator>> ranks = *CreateThreadCommunicators(kRanks);
  std::vector<std::vector<int32_t>> outs(kRanks, std::vector<int32_t>(kRanks * kRows * kCols));
  OnRanks(ranks, [&](Communicator& rank) {
    std::vector<int32_t> in(kRows * kCols);
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      in[i] = rank.rank() * 1000 + static_cast<int32_t>(i);
    }
    // Two collectives in a row: the second must not overwrite an input the first still reads.
    for (int32_t round = 0; round < 2; ++round) {
      rank.AllGather(in.data(), kRows, kCols * sizeof(int32_t),
                     outs[static_cast<size_t>(rank.rank())].data());
    }
    EXPECT_TRUE(rank.TakeStatus().ok());
  });
  for (const std::vector<int32_t>& out : outs) {
    for (int64_t row = 0; row < kRows; ++row) {
      for (int32_t r = 0; r < kRanks; ++r) {
        for (int64_t c = 0; c < kCols; ++c) {
          EXPECT_EQ(out[(row * kRanks + r) * kCols + c], int64_t{r} * 1000 + row * kCols + c);
        }
      }
    }
  }
}

TEST(ThreadCommunicatorTest, AllReduceSumAddsInRankOrder) {
  constexpr int32_t kRanks = 4;
  std::vector<std::unique_ptr<Communicator>> ranks = *CreateThreadCommunicators(kRanks);
  // 1e8 + 1 - 1e8 + 1: 2 in rank order, other orders round the ones away differently.
  const float values[kRanks] = {1e8f, 1.0f, -1e8f, 1.0f};
  std::vector<float> sums(kRanks);
  for (int32_t trial = 0; trial < 20; ++trial) {
    OnRanks(ranks, [&](Communicator& rank) {
      const float in = values[rank.rank()];
      rank.AllReduceSum(&in, 1, &sums[static_cast<size_t>(rank.rank())]);
    });
    for (const float sum : sums) EXPECT_EQ(sum, ((1e8f + 1.0f) + -1e8f) + 1.0f);
  }
}

TEST(ThreadCommunicatorTest, AbortFreesTheRanksWaitingAndResetRestores) {
  std::vector<std::unique_ptr<Communicator>> ranks = *CreateThreadCommunicators(3);
  std::vector<float> out(3);
  // Ranks 1 and 2 wait in a collective rank 0 never joins: it aborts instead.
  OnRanks(ranks, [&](Communicator& rank) {
    if (rank.rank() == 0) {
      rank.Abort();
      return;
    }
    const float in = 1.0f;
    rank.AllReduceSum(&in, 1, &out[static_cast<size_t>(rank.rank())]);
    EXPECT_TRUE(absl::IsAborted(rank.TakeStatus()));
    EXPECT_TRUE(rank.TakeStatus().ok());
  });
  ranks[0]->Reset();
  OnRanks(ranks, [&](Communicator& rank) {
    const float in = 1.0f;
    rank.AllReduceSum(&in, 1, &out[static_cast<size_t>(rank.rank())]);
    EXPECT_TRUE(rank.TakeStatus().ok());
  });
  EXPECT_EQ(out, std::vector<float>(3, 3.0f));
  EXPECT_TRUE(absl::IsInvalidArgument(CreateThreadCommunicators(0).status()));
}

}  // namespace
}  // namespace pulse
