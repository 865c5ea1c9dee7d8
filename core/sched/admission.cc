#include "core/sched/admission.h"

#include <algorithm>

namespace pulse {
namespace {

// The weight of the newest step in each average: about the last ten steps count.
constexpr double kNewest = 0.2;

// `average` after `sample`, the first of them when `count` is 0.
double Average(double average, double sample, int64_t count) {
  return count == 0 ? sample : average + kNewest * (sample - average);
}

}  // namespace

void StepCosts::Record(double step_seconds, int32_t offloaded_rows, int64_t recall_bytes,
                       double recall_seconds, bool overlapped) {
  if (offloaded_rows <= 0) return;
  if (!overlapped) {
    compute_seconds_ =
        Average(compute_seconds_, std::max(0.0, step_seconds - recall_seconds), compute_steps_);
    ++compute_steps_;
  }
  recall_bytes_per_row_ =
      Average(recall_bytes_per_row_,
              static_cast<double>(recall_bytes) / static_cast<double>(offloaded_rows), steps_);
  ++steps_;
  if (recall_bytes > 0 && recall_seconds > 0) {
    link_bytes_per_second_ = Average(
        link_bytes_per_second_, static_cast<double>(recall_bytes) / recall_seconds, link_steps_);
    ++link_steps_;
  }
}

double StepCosts::PredictedRecallSeconds(int32_t offloaded_rows) const {
  if (!measured()) return 0;
  return recall_bytes_per_row_ * offloaded_rows / link_bytes_per_second_;
}

Placement AdmissionPolicy::Place(const AdmissionView& view) const {
  if (kind_ == AdmissionKind::kOffloadEvery) return Placement::kOffloaded;
  if (view.fits_resident) return Placement::kResident;
  if (view.offloaded_running == 0 || view.costs == nullptr) return Placement::kOffloaded;
  return RecallKeepsUp(view.offloaded_running + 1, *view.costs) ? Placement::kOffloaded
                                                                : Placement::kWait;
}

bool AdmissionPolicy::RecallKeepsUp(int32_t offloaded, const StepCosts& costs) {
  return !costs.measured() || costs.PredictedRecallSeconds(offloaded) <= costs.compute_seconds();
}

}  // namespace pulse
