// The inputs of one forward pass built from the scheduler's work (Scheduler::FormBatch): the
// StepBatch, with each request's KV blocks grown to cover its tokens, and for a backend that
// samples, each sampled row's draw and the penalised ids the draws point into.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/backend/sampling.h"
#include "core/base/status.h"
#include "core/model/step_batch.h"
#include "core/sched/request.h"
#include "core/sched/scheduler.h"

namespace pulse {

class StepBuilder {
 public:
  // `sample_on_backend`: the backend draws the tokens (otherwise the logits go to the host).
  StepBuilder(int32_t block_tokens, bool sample_on_backend);

  // Empties the inputs for the next step.
  void Clear();
  // Adds the sequence's tokens to the batch (and, when it is sampled on the backend, its draw,
  // which advances its request's sampler). Fails, adding nothing to the batch, only when the
  // request's blocks cannot grow to cover them: a bug, since the admission reserved its worst case.
  absl::Status Add(const ScheduledSequence& sequence);

  const StepBatch& batch() const { return batch_; }
  std::span<const TokenSampling> sampling() const { return sampling_; }
  std::span<const int32_t> penalised_ids() const { return penalised_ids_; }

 private:
  const int32_t block_tokens_;
  const bool sample_on_backend_;
  StepBatch batch_;
  std::vector<TokenSampling> sampling_;  // one a logit row, with sample_on_backend
  std::vector<int32_t> penalised_ids_;
};

}  // namespace pulse
