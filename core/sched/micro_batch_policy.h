// How many micro-batches a decode step runs as (EngineOptions::micro_batches), the engine's
// side of the layer-wise scheduling that the model runner carries out (core/model/forward.h,
// docs/design/scheduling.md). Splitting a step lets one micro-batch's recall land while another
// computes, at the price of reading the weights once more per extra micro-batch; so the
// adaptive choice splits only steps that recall a good share of their compute time, and only
// while split steps measure faster.
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
  // at least kEligibleRecallShare of its compute time (such a step is eligible). The model,
  // t = max(recall, compute + one more read of the weights) against recall + compute, says a
  // split pays wherever the recall exceeds that extra read of the weights, which is not measured
  // apart; and it holds only where the backend overlaps the copy with compute as planned. So the
  // eligible steps follow the way measured faster (Observe): two until a step run as two is
  // measured, then one until a step run as one is, then the faster a row, with every
  // kProbeInterval-th eligible step the other way to keep both measured (and compute, which
  // StepCosts measures only on steps that run as one). While one is faster, each split probe
  // that measures slower than one's average doubles the interval between split probes, up to
  // kMaxProbeInterval, so that a load where splitting never pays stops paying for its probes;
  // any other probe resets it.
  int32_t Choose(const MicroBatchView& view);
  // The wall time of the step just chosen, with its decode rows; not counted where the step
  // was the first of its shape or captured its graph (`first_of_shape`,
  // ModelRunner::step_first_of_shape): tens of milliseconds that a 40 ms step would be judged by.
  void Observe(double seconds, int32_t decode_rows, bool first_of_shape);

  // The steps split into several micro-batches, and the eligible steps run against the
  // preference to keep both measured.
  int64_t split_steps() const { return split_steps_; }
  int64_t probe_steps() const { return probe_steps_; }
  int32_t last() const { return last_; }
  // Whether the measured eligible steps prefer one micro-batch.
  bool prefers_one() const;

  static constexpr int32_t kProbeInterval = 16;
  static constexpr int32_t kMaxProbeInterval = 256;
  static constexpr double kEligibleRecallShare = 0.25;

 private:
  // Seconds a decode row of the eligible steps run one way, as a moving average.
  struct RowTime {
    void Add(double seconds_per_row);
    int64_t steps = 0;
    double seconds_per_row = 0;
  };

  int32_t fixed_;
  int32_t since_probe_ = 0;                        // eligible steps since the last probe
  int32_t split_probe_interval_ = kProbeInterval;  // between split probes while one is faster
  bool last_probe_ = false;
  int64_t split_steps_ = 0;
  int64_t probe_steps_ = 0;
  int32_t last_ = 1;
  bool last_eligible_ = false;
  RowTime whole_;  // eligible steps run as one
  RowTime split_;  // eligible steps run as two
};

}  // namespace pulse
