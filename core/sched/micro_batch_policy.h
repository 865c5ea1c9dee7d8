// How many micro-batches a decode step runs as (EngineOptions::micro_batches), the engine's
// side of the layer-wise scheduling that the model runner carries out (core/model/forward.h,
// docs/design/scheduling.md). Splitting a step lets one micro-batch's recall land while another
// computes, at the price of reading the weights once more per extra micro-batch; so the
// adaptive choice splits only what recalls at least as long as it computes.
#pragma once

#include <cstdint>

#include "core/sched/admission.h"

namespace pulse {

// What the policy sees of the step it sizes.
struct MicroBatchView {
  int32_t decode_rows = 0;     // its sequences, when it decodes only (else 0)
  int32_t offloaded_rows = 0;  // of them, offloaded
  const StepCosts* costs = nullptr;
};

class MicroBatchPolicy {
 public:
  // `fixed` 0: adaptive, up to 2; otherwise every decode step of at least `fixed` sequences
  // runs as `fixed` micro-batches (fewer sequences, one each).
  explicit MicroBatchPolicy(int32_t fixed) : fixed_(fixed) {}

  // The micro-batches of the next step. Adaptive: one unless the step decodes only, has an
  // offloaded row and two sequences or more, and the measured rates predict its recall to take
  // at least its compute time; then two, with time t = max(recall, compute + one more read of
  // the weights) against recall + compute for one, which is never slower as the weights' read
  // is part of compute. Compute is measured only on steps that run as one (StepCosts), so
  // every kProbeInterval-th split step runs as one instead to keep it current.
  int32_t Choose(const MicroBatchView& view);

  // The steps split into several micro-batches, and those run as one to measure compute.
  int64_t split_steps() const { return split_steps_; }
  int64_t probe_steps() const { return probe_steps_; }
  int32_t last() const { return last_; }

  static constexpr int32_t kProbeInterval = 16;

 private:
  int32_t fixed_;
  int32_t since_probe_ = 0;  // split steps since the last probe
  int64_t split_steps_ = 0;
  int64_t probe_steps_ = 0;
  int32_t last_ = 1;
};

}  // namespace pulse
