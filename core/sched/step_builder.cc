#include "core/sched/step_builder.h"

#include "core/offload/residency.h"

namespace pulse {
namespace {

// Adds an offloaded request's sequence. While the request decodes, only its sinks, its window and
// the block written stay resident; the blocks that left the window were written back to the host
// tier when they filled, and the step keeps them in free device slots. A staged prompt's chunk
// has no resident block.
absl::Status AddOffloaded(const ScheduledSequence& sequence, std::span<const int32_t> tokens,
                          LogitRows logits, int32_t block_tokens, StepBatch& batch) {
  Request& request = *sequence.request;
  OffloadedBlockTable& blocks = *request.offloaded_blocks;
  if (request.staged) {
    PULSE_RETURN_IF_ERROR(blocks.GrowHost(sequence.begin + sequence.count));
    batch.AddStagedSequence(tokens, sequence.begin, blocks.host_blocks(), logits);
    return absl::OkStatus();
  }
  std::vector<WriteBackEntry> departed;
  if (sequence.decode) {
    departed = KeepResidentSet(blocks, *request.offload, block_tokens, sequence.begin);
  }
  PULSE_RETURN_IF_ERROR(blocks.Grow(sequence.begin + sequence.count));
  batch.AddSequence(tokens, sequence.begin, blocks.device_blocks(), logits,
                    SparseSelection{*request.offload, request.id}, blocks.host_blocks(), departed);
  return absl::OkStatus();
}

}  // namespace

StepBuilder::StepBuilder(int32_t block_tokens, bool sample_on_backend)
    : block_tokens_(block_tokens), sample_on_backend_(sample_on_backend) {}

void StepBuilder::Clear() {
  batch_.Clear();
  sampling_.clear();
  penalised_ids_.clear();
}

absl::Status StepBuilder::Add(const ScheduledSequence& sequence) {
  Request& request = *sequence.request;
  const std::span<const int32_t> tokens =
      std::span<const int32_t>(request.tokens)
          .subspan(static_cast<size_t>(sequence.begin), static_cast<size_t>(sequence.count));
  const LogitRows logits = sequence.sample ? LogitRows::kLast : LogitRows::kNone;
  if (request.offload) {
    PULSE_RETURN_IF_ERROR(AddOffloaded(sequence, tokens, logits, block_tokens_, batch_));
  } else {
    PULSE_RETURN_IF_ERROR(request.blocks->Grow(sequence.begin + sequence.count));
    batch_.AddSequence(tokens, sequence.begin, request.blocks->blocks(), logits);
  }
  if (sequence.sample && sample_on_backend_) {
    sampling_.push_back(request.sampler.Next(request.tokens, penalised_ids_));
  }
  return absl::OkStatus();
}

}  // namespace pulse
