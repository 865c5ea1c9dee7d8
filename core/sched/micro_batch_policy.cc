#include "core/sched/micro_batch_policy.h"

#include <algorithm>

namespace pulse {

int32_t MicroBatchPolicy::Choose(const MicroBatchView& view) {
  int32_t count = 1;
  if (view.decode_rows >= 2) {
    if (fixed_ > 0) {
      count = std::min(fixed_, view.decode_rows);
    } else if (view.offloaded_rows > 0 && view.costs != nullptr && view.costs->measured() &&
               view.costs->PredictedRecallSeconds(view.offloaded_rows) >=
                   view.costs->compute_seconds()) {
      if (++since_probe_ >= kProbeInterval) {
        since_probe_ = 0;
        ++probe_steps_;
      } else {
        count = 2;
      }
    }
  }
  if (count > 1) ++split_steps_;
  last_ = count;
  return count;
}

}  // namespace pulse
