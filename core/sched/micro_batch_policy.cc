#include "core/sched/micro_batch_policy.h"

#include <algorithm>

namespace pulse {

void MicroBatchPolicy::RowTime::Add(double seconds) {
  seconds_per_row = StepAverage(seconds_per_row, seconds, steps);
  ++steps;
}

bool MicroBatchPolicy::prefers_one() const {
  return whole_.steps > 0 && split_.steps > 0 && split_.seconds_per_row > whole_.seconds_per_row;
}

int32_t MicroBatchPolicy::Choose(const MicroBatchView& view) {
  int32_t count = 1;
  last_eligible_ = false;
  last_probe_ = false;
  if (view.decode_rows >= 2) {
    if (fixed_ > 0) {
      count = std::min(fixed_, view.decode_rows);
    } else if (view.offloaded_rows > 0 && view.costs != nullptr && view.costs->measured() &&
               view.costs->PredictedRecallSeconds(view.offloaded_rows) >=
                   kEligibleRecallShare * view.costs->compute_seconds()) {
      last_eligible_ = true;
      const bool split = !prefers_one();
      // Once two have been measured, one is at once, so that the faster way is known early.
      const bool first_whole = split_.steps > 0 && whole_.steps == 0;
      const int32_t interval = split ? kProbeInterval : split_probe_interval_;
      if (first_whole || ++since_probe_ >= interval) {
        since_probe_ = 0;
        ++probe_steps_;
        last_probe_ = true;
        count = split ? 1 : 2;
      } else {
        count = split ? 2 : 1;
      }
    }
  }
  if (count > 1) ++split_steps_;
  last_ = count;
  return count;
}

void MicroBatchPolicy::Observe(double seconds, int32_t decode_rows, bool first_of_shape) {
  if (last_eligible_ && decode_rows >= 1 && !first_of_shape) {
    const double seconds_per_row = seconds / decode_rows;
    (last_ > 1 ? split_ : whole_).Add(seconds_per_row);
    if (last_probe_ && last_ > 1 && seconds_per_row > whole_.seconds_per_row) {
      split_probe_interval_ = std::min(2 * split_probe_interval_, kMaxProbeInterval);
    } else if (last_probe_ || !prefers_one()) {
      split_probe_interval_ = kProbeInterval;
    }
  }
  last_eligible_ = false;
  last_probe_ = false;
}

}  // namespace pulse
