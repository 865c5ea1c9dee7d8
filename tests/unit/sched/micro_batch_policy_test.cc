// MicroBatchPolicy's choices from given rates.
#include "core/sched/micro_batch_policy.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

// Rates that predict `recall_ms` of recall a step for each offloaded row and `compute_ms` of
// compute: 1 GB/s, so recall_ms MB a row.
StepCosts Costs(double recall_ms, double compute_ms) {
  StepCosts costs;
  const double recall = recall_ms * 1e-3;
  costs.Record({.seconds = compute_ms * 1e-3 + recall,
                .offloaded_rows = 1,
                .recall_bytes = static_cast<int64_t>(recall * 1e9),
                .recall_seconds = recall});
  return costs;
}

TEST(MicroBatchPolicyTest, AFixedCountSplitsEveryDecodeStepOfThatManySequences) {
  MicroBatchPolicy policy(3);
  EXPECT_EQ(policy.Choose({.decode_rows = 8}), 3);
  EXPECT_EQ(policy.Choose({.decode_rows = 2}), 2);
  EXPECT_EQ(policy.Choose({.decode_rows = 1}), 1);
  EXPECT_EQ(policy.Choose({.decode_rows = 0}), 1);  // a step with a prompt chunk
  EXPECT_EQ(policy.split_steps(), 2);
  EXPECT_EQ(policy.last(), 1);
}

TEST(MicroBatchPolicyTest, AdaptiveSplitsInTwoOnlyWhatRecallsAQuarterOfItsCompute) {
  MicroBatchPolicy policy(0);
  const StepCosts unmeasured;
  EXPECT_EQ(policy.Choose({.decode_rows = 8, .offloaded_rows = 8, .costs = &unmeasured}), 1);
  const StepCosts fast_link = Costs(/*recall_ms=*/0.25, /*compute_ms=*/10);
  // 9 rows of 0.25 ms against 10 ms of compute: under a quarter of it, so one.
  EXPECT_EQ(policy.Choose({.decode_rows = 9, .offloaded_rows = 9, .costs = &fast_link}), 1);
  // 10 rows: a quarter, so two.
  EXPECT_EQ(policy.Choose({.decode_rows = 12, .offloaded_rows = 10, .costs = &fast_link}), 2);
  const StepCosts slow_link = Costs(/*recall_ms=*/20, /*compute_ms=*/10);
  EXPECT_EQ(policy.Choose({.decode_rows = 4, .offloaded_rows = 1, .costs = &slow_link}), 2);
  EXPECT_EQ(policy.last(), 2);
  // Nothing offloaded, one sequence, or a prompt chunk: one.
  EXPECT_EQ(policy.Choose({.decode_rows = 4, .offloaded_rows = 0, .costs = &slow_link}), 1);
  EXPECT_EQ(policy.Choose({.decode_rows = 1, .offloaded_rows = 1, .costs = &slow_link}), 1);
  EXPECT_EQ(policy.Choose({.decode_rows = 0, .offloaded_rows = 0, .costs = &slow_link}), 1);
  EXPECT_EQ(policy.split_steps(), 2);
  EXPECT_EQ(policy.probe_steps(), 0);
}

TEST(MicroBatchPolicyTest, EverySixteenthSplitStepRunsAsOneToMeasureCompute) {
  MicroBatchPolicy policy(0);
  const StepCosts slow_link = Costs(20, 10);
  const MicroBatchView view{.decode_rows = 4, .offloaded_rows = 4, .costs = &slow_link};
  int32_t ones = 0;
  for (int32_t step = 0; step < 3 * MicroBatchPolicy::kProbeInterval; ++step) {
    const int32_t count = policy.Choose(view);
    if (count == 1) {
      ++ones;
      EXPECT_EQ(step % MicroBatchPolicy::kProbeInterval, MicroBatchPolicy::kProbeInterval - 1);
    }
  }
  EXPECT_EQ(ones, 3);
  EXPECT_EQ(policy.probe_steps(), 3);
  EXPECT_EQ(policy.split_steps(), 3 * MicroBatchPolicy::kProbeInterval - 3);
}

// Where split steps measure slower a row than steps run as one (a backend that does not overlap
// the copy, or whose extra weight pass costs more than the recall hidden), the eligible steps run
// as one, the sixteenth as two to measure again; once two measure faster, two again.
TEST(MicroBatchPolicyTest, EligibleStepsFollowTheFasterMeasuredWay) {
  MicroBatchPolicy policy(0);
  const StepCosts slow_link = Costs(20, 10);
  const MicroBatchView view{.decode_rows = 4, .offloaded_rows = 4, .costs = &slow_link};
  double split_ms = 40;  // a step of four rows
  const double whole_ms = 30;
  const auto step = [&] {
    const int32_t count = policy.Choose(view);
    policy.Observe((count > 1 ? split_ms : whole_ms) * 1e-3, view.decode_rows, false);
    return count;
  };
  // Two first, then one at once to measure it too (a probe).
  EXPECT_EQ(step(), 2);
  EXPECT_EQ(step(), 1);
  EXPECT_EQ(policy.probe_steps(), 1);
  EXPECT_TRUE(policy.prefers_one());
  int32_t twos = 0;
  for (int32_t i = 0; i < 2 * MicroBatchPolicy::kProbeInterval; ++i) twos += step() > 1 ? 1 : 0;
  EXPECT_EQ(twos, 1);  // the probe (slower again: the next one comes twice as late)
  // Two gets faster than one: within a few probes (each moves its average a fifth of the way)
  // its average falls below one's, after which the eligible steps split again.
  split_ms = 10;
  int32_t i = 0;
  while (policy.prefers_one() && i++ < 3 * MicroBatchPolicy::kProbeInterval) step();
  EXPECT_FALSE(policy.prefers_one());
  EXPECT_EQ(step(), 2);
  // Steps that are not eligible are neither chosen by nor counted in the measurements.
  const int64_t probes = policy.probe_steps();
  EXPECT_EQ(policy.Choose({.decode_rows = 4, .offloaded_rows = 0, .costs = &slow_link}), 1);
  policy.Observe(1.0, 4, false);
  EXPECT_FALSE(policy.prefers_one());
  EXPECT_EQ(policy.probe_steps(), probes);
}

// While one stays faster, each split probe that measures slower again comes twice as late as the
// one before, up to kMaxProbeInterval eligible steps; a probe that measures faster brings them
// back to every kProbeInterval-th.
TEST(MicroBatchPolicyTest, SplitProbesThinOutWhileSplittingStaysSlower) {
  MicroBatchPolicy policy(0);
  const StepCosts slow_link = Costs(20, 10);
  const MicroBatchView view{.decode_rows = 4, .offloaded_rows = 4, .costs = &slow_link};
  double split_ms = 40;
  const auto step = [&] {
    const int32_t count = policy.Choose(view);
    policy.Observe((count > 1 ? split_ms : 30.0) * 1e-3, view.decode_rows, false);
    return count;
  };
  EXPECT_EQ(step(), 2);
  EXPECT_EQ(step(), 1);  // one measured: faster
  std::vector<int32_t> gaps;
  int32_t since = 0;
  for (int32_t i = 0; i < 2000; ++i) {
    ++since;
    if (step() > 1) {
      gaps.push_back(since);
      since = 0;
    }
  }
  constexpr int32_t kFirst = MicroBatchPolicy::kProbeInterval;
  constexpr int32_t kMax = MicroBatchPolicy::kMaxProbeInterval;
  ASSERT_GE(gaps.size(), 6u);
  EXPECT_THAT(std::vector<int32_t>(gaps.begin(), gaps.begin() + 6),
              ::testing::ElementsAre(kFirst, 2 * kFirst, 4 * kFirst, 8 * kFirst, kMax, kMax));
  // Splitting gets faster: the next probe says so, and the probes come every sixteenth again
  // until the averages turn.
  split_ms = 10;
  int32_t to_probe = 0;
  while (step() == 1) ++to_probe;
  EXPECT_LE(to_probe, kMax);
  EXPECT_TRUE(policy.prefers_one());  // one sample moves the split average a fifth of the way
  int32_t next = 1;
  while (step() == 1) ++next;
  EXPECT_EQ(next, kFirst);
}

// A step that runs its shape for the first time, or captures its graph, takes what later steps
// of the shape do not: its time is not its way's.
TEST(MicroBatchPolicyTest, StepsThatSetUpTheirShapeAreNotMeasured) {
  MicroBatchPolicy policy(0);
  const StepCosts slow_link = Costs(20, 10);
  const MicroBatchView view{.decode_rows = 4, .offloaded_rows = 4, .costs = &slow_link};
  int32_t splits = 0;
  int32_t wholes = 0;
  std::vector<int32_t> counts;
  const auto step = [&] {
    const int32_t count = policy.Choose(view);
    counts.push_back(count);
    // Two: 300 ms op by op the first time, 1000 ms capturing its graph, then 40; one: its shape
    // set up, 5 ms op by op the first time (a step that reads little), then 60.
    const int32_t run = count > 1 ? splits++ : wholes++;
    const bool first_of_shape = run < (count > 1 ? 2 : 1);
    const double ms = count > 1 ? (run == 0 ? 300 : run == 1 ? 1000 : 40) : (run == 0 ? 5 : 60);
    policy.Observe(ms * 1e-3, view.decode_rows, first_of_shape);
  };
  for (int32_t i = 0; i < 5; ++i) step();
  EXPECT_EQ(counts, (std::vector<int32_t>{2, 2, 2, 1, 1}));
  EXPECT_FALSE(policy.prefers_one());
  step();
  EXPECT_EQ(counts.back(), 2);
}

TEST(StepCostsTest, AStepOfSeveralMicroBatchesLeavesComputeAlone) {
  StepCosts costs;
  costs.Record(
      {.seconds = 0.010, .offloaded_rows = 2, .recall_bytes = 2'000'000, .recall_seconds = 0.002});
  // Split: its recall overlapped compute, so 12 - 6 says nothing of compute; bytes and link
  // still count.
  costs.Record({.seconds = 0.012,
                .offloaded_rows = 2,
                .recall_bytes = 6'000'000,
                .recall_seconds = 0.006,
                .overlapped = true});
  EXPECT_DOUBLE_EQ(costs.compute_seconds(), 0.008);
  EXPECT_DOUBLE_EQ(costs.recall_bytes_per_row(), 1e6 + 0.2 * 2e6);
  EXPECT_DOUBLE_EQ(costs.link_bytes_per_second(), 1e9);
}

}  // namespace
}  // namespace pulse
