#include "core/sched/admission.h"

#include <algorithm>

namespace pulse {
namespace {

// The weight of the newest step in each average.
constexpr double kNewest = 0.2;

}  // namespace

double StepAverage(double average, double sample, int64_t count) {
  return count == 0 ? sample : average + kNewest * (sample - average);
}

void StepCosts::Record(const StepSample& step) {
  if (step.offloaded_rows <= 0) return;
  if (!step.overlapped) {
    const double copies = step.recall_seconds + step.writeback_seconds;
    compute_seconds_ =
        StepAverage(compute_seconds_, std::max(0.0, step.seconds - copies), compute_steps_);
    ++compute_steps_;
  }
  recall_bytes_per_row_ = StepAverage(
      recall_bytes_per_row_,
      static_cast<double>(step.recall_bytes) / static_cast<double>(step.offloaded_rows), steps_);
  ++steps_;
  if (step.recall_bytes > 0 && step.recall_seconds > 0) {
    link_bytes_per_second_ =
        StepAverage(link_bytes_per_second_,
                    static_cast<double>(step.recall_bytes) / step.recall_seconds, link_steps_);
    ++link_steps_;
  }
}

void StepCosts::Calibrate(double link_bytes_per_second) {
  if (link_steps_ == 0) link_bytes_per_second_ = link_bytes_per_second;
}

double StepCosts::PredictedRecallSeconds(int32_t offloaded_rows) const {
  return RecallSeconds(recall_bytes_per_row_ * offloaded_rows);
}

double StepCosts::RecallSeconds(double bytes) const {
  return measured() ? bytes / link_bytes_per_second_ : 0.0;
}

void RequestRecall::Record(int64_t total_bytes) {
  bytes_per_step_ =
      StepAverage(bytes_per_step_, static_cast<double>(total_bytes - total_bytes_), steps_);
  total_bytes_ = total_bytes;
  ++steps_;
}

Placement AdmissionPolicy::Place(const AdmissionView& view) const {
  if (kind_ == AdmissionKind::kOffloadEvery) return Placement::kOffloaded;
  if (view.fits_resident) return Placement::kResident;
  if (view.offloaded_running == 0 || view.costs == nullptr) return Placement::kOffloaded;
  return RecallKeepsUp(view.running_recall_bytes + view.costs->recall_bytes_per_row(), *view.costs)
             ? Placement::kOffloaded
             : Placement::kWait;
}

int32_t AdmissionPolicy::LoweredBudget(const AdmissionView& view) const {
  if (kind_ != AdmissionKind::kIoAdaptive || min_budget_tokens_ <= 0 || view.costs == nullptr ||
      !view.costs->measured() || view.budget_tokens <= min_budget_tokens_) {
    return 0;
  }
  for (int32_t budget = view.budget_tokens;;) {
    budget = std::max(budget / 2, min_budget_tokens_);
    const double row = view.costs->recall_bytes_per_row() * budget / view.budget_tokens;
    if (RecallKeepsUp(view.running_recall_bytes + row, *view.costs)) return budget;
    if (budget == min_budget_tokens_) return 0;
  }
}

bool AdmissionPolicy::RecallKeepsUp(double recall_bytes, const StepCosts& costs) {
  return !costs.measured() || costs.RecallSeconds(recall_bytes) <= costs.compute_seconds();
}

}  // namespace pulse
