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
  costs.Record(0.5, 0, 0, 0.0);
  EXPECT_FALSE(costs.measured());
  EXPECT_EQ(costs.compute_seconds(), 0.0);
  // 10 ms, 2 of 4 rows offloaded, 2 MB recalled in 2 ms: 8 ms of compute, 1 MB a row, 1 GB/s.
  costs.Record(0.010, 2, 2'000'000, 0.002);
  ASSERT_TRUE(costs.measured());
  EXPECT_DOUBLE_EQ(costs.compute_seconds(), 0.008);
  EXPECT_DOUBLE_EQ(costs.recall_bytes_per_row(), 1e6);
  EXPECT_DOUBLE_EQ(costs.link_bytes_per_second(), 1e9);
  EXPECT_DOUBLE_EQ(costs.PredictedRecallSeconds(3), 0.003);
  // The next step moves each average a fifth of the way: 16 ms of compute, 2 MB a row, and a
  // step whose slots all hit (nothing recalled) counts for the bytes but not for the link.
  costs.Record(0.020, 2, 4'000'000, 0.004);
  EXPECT_DOUBLE_EQ(costs.compute_seconds(), 0.008 + 0.2 * 0.008);
  EXPECT_DOUBLE_EQ(costs.recall_bytes_per_row(), 1.2e6);
  EXPECT_DOUBLE_EQ(costs.link_bytes_per_second(), 1e9);
  costs.Record(0.010, 2, 0, 0.0);
  EXPECT_DOUBLE_EQ(costs.recall_bytes_per_row(), 1.2e6 * 0.8);
  EXPECT_DOUBLE_EQ(costs.link_bytes_per_second(), 1e9);
}

TEST(StepCostsTest, ComputeIsNeverNegative) {
  StepCosts costs;
  costs.Record(0.001, 1, 1000, 0.002);  // the copy engine's time exceeds the step's
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
  costs.Record(0.010, 2, 2'000'000, 0.002);  // 8 ms of compute, 1 ms of recall a row
  EXPECT_EQ(policy.Place({.offloaded_running = 0, .costs = &costs}), Placement::kOffloaded);
  // With 6 running, a seventh predicts 7 ms of recall: within 8 ms. With 8, a ninth predicts 9.
  EXPECT_EQ(policy.Place({.offloaded_running = 6, .costs = &costs}), Placement::kOffloaded);
  EXPECT_EQ(policy.Place({.offloaded_running = 8, .costs = &costs}), Placement::kWait);
  EXPECT_EQ(policy.Place({.fits_resident = true, .offloaded_running = 8, .costs = &costs}),
            Placement::kResident);
}

}  // namespace
}  // namespace pulse
