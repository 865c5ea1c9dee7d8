// How many micro-batches a decode step runs as (EngineOptions::micro_batches), the engine's
// side of the layer-wise scheduling that the model runner carries out (core/model/forward.h,
// docs/design/scheduling.md). Splitting a step lets one micro-batch's recall land while another
// computes, at the price of reading the weights once more per extra micro-batch; so the
// adaptive choice splits only what recalls at least as long as it computes, and only while
// split steps measure faster.
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
  // at least its compute time (such a step is eligible). An eligible step runs as two unless the
  // eligible steps measured (Observe) say two take longer a row than one: the model's promise,
  // t = max(recall, compute + one more read of the weights) against recall + compute, holds only
  // where the backend overlaps the copy with compute as planned, and each extra micro-batch
  // costs a weight pass and launches that a small step may not repay. Every kProbeInterval-th
  // eligible step runs the other way, to keep both measured (and compute, which StepCosts
  // measures only on steps that run as one).
  int32_t Choose(const MicroBatchView& view);
  // The wall time of the step just chosen, with its decode rows.
  void Observe(double seconds, int32_t decode_rows);

  // The steps split into several micro-batches, and the eligible steps run against the
  // preference to keep both measured.
  int64_t split_steps() const { return split_steps_; }
  int64_t probe_steps() const { return probe_steps_; }
  int32_t last() const { return last_; }
  // Whether the measured eligible steps prefer one micro-batch.
  bool prefers_one() const;

  static constexpr int32_t kProbeInterval = 16;

 private:
  // Seconds a decode row of the eligible steps run one way, as a moving average.
  struct RowTime {
    void Add(double seconds_per_row);
    int64_t steps = 0;
    double seconds_per_row = 0;
  };

  int32_t fixed_;
  int32_t since_probe_ = 0;  // eligible steps since the last probe
  int64_t split_steps_ = 0;
  int64_t probe_steps_ = 0;
  int32_t last_ = 1;
  bool last_eligible_ = false;
  RowTime whole_;  // eligible steps run as one
  RowTime split_;  // eligible steps run as two
};

}  // namespace pulse
