// Where a queued request of an offloading engine runs, and whether it is admitted now
// (EngineOptions::admission). The scheduler asks AdmissionPolicy::Place for the head of its queue
// each time it admits; StepCosts holds the rates the I/O-adaptive policy predicts from, measured
// by the engine over its decode steps.
#pragma once

#include <cstdint>

#include "core/sched/engine.h"

namespace pulse {

// One finished decode-only step as StepCosts averages it.
struct StepSample {
  double seconds = 0;  // its wall time
  int32_t offloaded_rows = 0;
  int64_t recall_bytes = 0;
  double recall_seconds = 0;     // the copy engine's time on its recalls
  double writeback_seconds = 0;  // and on its write-backs, which share the link
  // It ran as several micro-batches, so its copies ran beside its compute and its wall time
  // less their time says nothing of its compute, which then keeps its average.
  bool overlapped = false;
};

// An exponential moving average of the engine's recent steps, each new one weighing a fifth
// (about the last ten steps count): `average` after `sample`, the first of them when `count`,
// the samples before it, is 0. StepCosts, RequestRecall and the micro-batch choice average so.
double StepAverage(double average, double sample, int64_t count);

// The rates of the engine's recent decode steps, as exponential moving averages. A step
// contributes when it decoded only (a prompt chunk would count prefill as decode compute) and
// when one of its rows was offloaded.
class StepCosts {
 public:
  void Record(const StepSample& step);
  // The link's rate as calibrated at start: shown until recalls are measured, which replace it.
  void Calibrate(double link_bytes_per_second);

  // Whether a step with recall has been measured: before that nothing is predicted.
  bool measured() const { return link_steps_ > 0; }
  // The link's rate as the copy engine moved recalls.
  double link_bytes_per_second() const { return link_bytes_per_second_; }
  // Recall bytes an offloaded row costs a step.
  double recall_bytes_per_row() const { return recall_bytes_per_row_; }
  // A step's time beside its copies: its wall time less the copy engine's time on its recalls
  // and write-backs, over the steps that ran as one micro-batch. Exact when the copies are
  // exposed, a lower bound when they overlap compute all the same (so the prediction errs
  // towards offloading less).
  double compute_seconds() const { return compute_seconds_; }
  // The recall time of a step with `offloaded_rows` offloaded rows, at the measured rates.
  double PredictedRecallSeconds(int32_t offloaded_rows) const;
  // The time the link takes for `bytes` at its measured rate (0 before it is measured).
  double RecallSeconds(double bytes) const;

 private:
  double link_bytes_per_second_ = 0;
  double recall_bytes_per_row_ = 0;
  double compute_seconds_ = 0;
  int64_t steps_ = 0;          // steps averaged
  int64_t compute_steps_ = 0;  // of them, those that ran as one micro-batch
  int64_t link_steps_ = 0;     // of them, those that recalled
};

// One offloaded request's recall a decode step, as an exponential moving average (the weight of
// StepCosts' averages), fed with the runner's running total of its recall bytes
// (SparseAttentionStats::recall_bytes of its key) after each step it decoded in.
class RequestRecall {
 public:
  void Record(int64_t total_bytes);
  bool measured() const { return steps_ > 0; }
  double bytes_per_step() const { return bytes_per_step_; }

 private:
  int64_t total_bytes_ = 0;  // the last total recorded
  double bytes_per_step_ = 0;
  int64_t steps_ = 0;
};

enum class Placement : uint8_t {
  kResident,   // its whole worst case reserved in the dense pool, attended densely
  kOffloaded,  // its blocks in the host tier, recalled as its selection picks them
  kWait,       // not now: the queue waits with it
};

// What a placement decision sees of the engine.
struct AdmissionView {
  // The request's whole worst case fits the dense pool now, with room left for the resident set
  // of one offloaded request like it (its sinks, window and the block written: a prompt the pool
  // cannot hold is prefilled staged) when the batch has room for another, so that resident
  // requests alone never close the pool to offloaded ones.
  bool fits_resident = false;
  int32_t offloaded_running = 0;  // offloaded requests running now (admitted this round included)
  int32_t budget_tokens = 0;      // the request's budget offloaded: the engine's
  // Their recall bytes a step: each one's own average, or the engine's a row before it has one.
  double running_recall_bytes = 0;
  const StepCosts* costs = nullptr;
};

class AdmissionPolicy {
 public:
  // `min_budget_tokens`: EngineOptions::min_budget_tokens (0: budgets are never lowered).
  explicit AdmissionPolicy(AdmissionKind kind, int32_t min_budget_tokens = 0)
      : kind_(kind), min_budget_tokens_(min_budget_tokens) {}

  // Where a request that the engine places (it asked for the engine's offloading, not its own
  // mode or budget) runs if admitted now. kOffloadEvery: offloaded. kIoAdaptive: resident when
  // it fits; else offloaded while the predicted recall time of a step with it (the running
  // requests' recall and the engine's average a row for it) stays within the measured compute
  // time (or nothing offloaded runs, or nothing is measured yet); else kWait.
  Placement Place(const AdmissionView& view) const;
  // For a request that Place makes wait: the largest of the view's budget halved once or more,
  // and at least the policy's least budget, at which the predicted recall of a step with it
  // keeps up (its recall a row taken as the engine's average a row scaled by the budgets'
  // ratio); 0 when none does, or when budgets are not lowered.
  int32_t LoweredBudget(const AdmissionView& view) const;
  // Whether a step that recalls `recall_bytes` keeps up as the rates stand: while nothing is
  // measured, or its recall time stays within the measured compute time.
  static bool RecallKeepsUp(double recall_bytes, const StepCosts& costs);

  AdmissionKind kind() const { return kind_; }

 private:
  AdmissionKind kind_;
  int32_t min_budget_tokens_;
};

}  // namespace pulse
