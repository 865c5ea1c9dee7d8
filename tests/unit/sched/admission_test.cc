// StepCosts' averages and AdmissionPolicy::Place's decisions, from given rates.
#include "core/sched/admission.h"

#include "gtest/gtest.h"

namespace pulse {
namespace {

TEST(StepCostsTest, AveragesDecodeStepsWithOffloadedRowsOnly) {
  StepCosts costs;
  EXPECT_FALSE(costs.measured());
  EXPECT_EQ(costs.PredictedRecallSeconds(4), 0.0);
  // Steps without an offloaded row say nothing about recall.
  costs.Record({.seconds = 0.5, .offloaded_rows = 0, .recall_bytes = 0, .recall_seconds = 0.0});
  EXPECT_FALSE(costs.measured());
  EXPECT_EQ(costs.compute_seconds(), 0.0);
  // 10 ms, 2 of 4 rows offloaded, 2 MB recalled in 2 ms: 8 ms of compute, 1 MB a row, 1 GB/s.
  costs.Record(
      {.seconds = 0.010, .offloaded_rows = 2, .recall_bytes = 2'000'000, .recall_seconds = 0.002});
  ASSERT_TRUE(costs.measured());
  EXPECT_DOUBLE_EQ(costs.compute_seconds(), 0.008);
  EXPECT_DOUBLE_EQ(costs.recall_bytes_per_row(), 1e6);
  EXPECT_DOUBLE_EQ(costs.link_bytes_per_second(), 1e9);
  EXPECT_DOUBLE_EQ(costs.PredictedRecallSeconds(3), 0.003);
  // The next step moves each average a fifth of the way: 16 ms of compute, 2 MB a row, and a
  // step whose slots all hit (nothing recalled) counts for the bytes but not for the link.
  costs.Record(
      {.seconds = 0.020, .offloaded_rows = 2, .recall_bytes = 4'000'000, .recall_seconds = 0.004});
  EXPECT_DOUBLE_EQ(costs.compute_seconds(), 0.008 + 0.2 * 0.008);
  EXPECT_DOUBLE_EQ(costs.recall_bytes_per_row(), 1.2e6);
  EXPECT_DOUBLE_EQ(costs.link_bytes_per_second(), 1e9);
  costs.Record({.seconds = 0.010, .offloaded_rows = 2, .recall_bytes = 0, .recall_seconds = 0.0});
  EXPECT_DOUBLE_EQ(costs.recall_bytes_per_row(), 1.2e6 * 0.8);
  EXPECT_DOUBLE_EQ(costs.link_bytes_per_second(), 1e9);
}

TEST(StepCostsTest, WriteBacksShareTheLinkAndAreNotCompute) {
  StepCosts costs;
  costs.Record({.seconds = 0.010,
                .offloaded_rows = 1,
                .recall_bytes = 2'000'000,
                .recall_seconds = 0.002,
                .writeback_seconds = 0.003});
  EXPECT_DOUBLE_EQ(costs.compute_seconds(), 0.005);
  EXPECT_DOUBLE_EQ(costs.link_bytes_per_second(), 1e9);
}

TEST(StepCostsTest, ComputeIsNeverNegative) {
  StepCosts costs;
  costs.Record({.seconds = 0.001,
                .offloaded_rows = 1,
                .recall_bytes = 1000,
                .recall_seconds = 0.002});  // the copy engine's time exceeds the step's
  EXPECT_EQ(costs.compute_seconds(), 0.0);
}

TEST(AdmissionPolicyTest, OffloadEveryOffloadsWhateverFits) {
  const AdmissionPolicy policy(AdmissionKind::kOffloadEvery);
  EXPECT_EQ(policy.Place({.fits_resident = true}), Placement::kOffloaded);
  EXPECT_EQ(policy.Place({.fits_resident = false, .offloaded_running = 100}),
            Placement::kOffloaded);
}

TEST(AdmissionPolicyTest, IoAdaptiveIsResidentWhileItFitsThenOffloadsWhileRecallKeepsUp) {
  const AdmissionPolicy policy(AdmissionKind::kIoAdaptive);
  StepCosts costs;
  EXPECT_EQ(policy.Place({.fits_resident = true, .offloaded_running = 3, .costs = &costs}),
            Placement::kResident);
  // Nothing measured yet, or nothing offloaded running: offloaded (the first one measures).
  EXPECT_EQ(policy.Place({.offloaded_running = 3, .costs = &costs}), Placement::kOffloaded);
  costs.Record({.seconds = 0.010,
                .offloaded_rows = 2,
                .recall_bytes = 2'000'000,
                .recall_seconds = 0.002});  // 8 ms of compute, 1 ms of recall a row
  EXPECT_EQ(policy.Place({.offloaded_running = 0, .costs = &costs}), Placement::kOffloaded);
  // With 6 running at the average, a seventh predicts 7 ms of recall: within 8 ms. With 8, a
  // ninth predicts 9.
  EXPECT_EQ(policy.Place({.offloaded_running = 6, .running_recall_bytes = 6e6, .costs = &costs}),
            Placement::kOffloaded);
  EXPECT_EQ(policy.Place({.offloaded_running = 8, .running_recall_bytes = 8e6, .costs = &costs}),
            Placement::kWait);
  EXPECT_EQ(policy.Place({.fits_resident = true,
                          .offloaded_running = 8,
                          .running_recall_bytes = 8e6,
                          .costs = &costs}),
            Placement::kResident);
  // Running requests that recall less than the average (their own rates) leave room for more.
  EXPECT_EQ(policy.Place({.offloaded_running = 8, .running_recall_bytes = 4e6, .costs = &costs}),
            Placement::kOffloaded);
}

// Where a request would wait for recall, a least budget lets admission halve the request's budget
// until the step's predicted recall keeps up, down to that least budget.
TEST(AdmissionPolicyTest, ABudgetIsHalvedUntilRecallKeepsUpDownToTheLeastOne) {
  StepCosts costs;
  costs.Record({.seconds = 0.010,
                .offloaded_rows = 2,
                .recall_bytes = 2'000'000,
                .recall_seconds = 0.002});  // 8 ms of compute, 1 ms of recall a row at 2048
  const AdmissionPolicy policy(AdmissionKind::kIoAdaptive, /*min_budget_tokens=*/256);
  const auto view = [&](double running_ms) {
    return AdmissionView{.offloaded_running = 8,
                         .budget_tokens = 2048,
                         .running_recall_bytes = running_ms * 1e6,
                         .costs = &costs};
  };
  ASSERT_EQ(policy.Place(view(7.5)), Placement::kWait);  // 8.5 ms with it
  EXPECT_EQ(policy.LoweredBudget(view(7.5)), 1024);      // 0.5 ms more: 8 ms
  EXPECT_EQ(policy.LoweredBudget(view(7.7)), 512);       // 0.25 ms more: 7.95 ms
  EXPECT_EQ(policy.LoweredBudget(view(7.8)), 256);       // 0.125 ms more: 7.925 ms
  EXPECT_EQ(policy.LoweredBudget(view(7.9)), 0);         // not even at 256
  // A least budget that is not a halving of the budget is tried last.
  const AdmissionPolicy odd(AdmissionKind::kIoAdaptive, /*min_budget_tokens=*/300);
  EXPECT_EQ(odd.LoweredBudget(view(7.8)), 300);  // 0.146 ms more: 7.946 ms
  // Budgets are not lowered without a least budget, when offloading every request, before
  // anything is measured, or below the least budget.
  EXPECT_EQ(AdmissionPolicy(AdmissionKind::kIoAdaptive).LoweredBudget(view(7.5)), 0);
  EXPECT_EQ(AdmissionPolicy(AdmissionKind::kOffloadEvery, 256).LoweredBudget(view(7.5)), 0);
  const StepCosts unmeasured;
  EXPECT_EQ(policy.LoweredBudget({.budget_tokens = 2048, .costs = &unmeasured}), 0);
  EXPECT_EQ(
      policy.LoweredBudget({.budget_tokens = 256, .running_recall_bytes = 7.9e6, .costs = &costs}),
      0);
}

TEST(RequestRecallTest, AveragesTheBytesOfEachStepFromTheRunningTotal) {
  RequestRecall recall;
  EXPECT_FALSE(recall.measured());
  recall.Record(1000);
  ASSERT_TRUE(recall.measured());
  EXPECT_DOUBLE_EQ(recall.bytes_per_step(), 1000);
  recall.Record(1000);  // nothing recalled this step
  EXPECT_DOUBLE_EQ(recall.bytes_per_step(), 800);
  recall.Record(3000);
  EXPECT_DOUBLE_EQ(recall.bytes_per_step(), 800 + 0.2 * (2000 - 800));
}

}  // namespace
}  // namespace pulse
