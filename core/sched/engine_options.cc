// EngineOptions::Validate: the bounds of each option on its own (what they resolve to on a model
// and its backend is capacity.h's).
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/model/forward.h"
#include "core/sched/engine.h"

namespace pulse {
namespace {

constexpr int32_t kMaxBatch = 4096;
constexpr int32_t kMaxStepTokens = 1 << 16;
constexpr int32_t kMaxBlockTokens = 4096;

}  // namespace

absl::Status EngineOptions::Validate() const {
  if (max_batch < 1 || max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_batch = %d is outside [1, %d]", max_batch, kMaxBatch));
  }
  if (prefill_chunk < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("prefill_chunk = %d must be >= 1", prefill_chunk));
  }
  if (max_step_tokens < max_batch || max_step_tokens > kMaxStepTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_step_tokens = %d is outside [max_batch = %d, %d]", max_step_tokens,
                        max_batch, kMaxStepTokens));
  }
  if (block_tokens < 0 || block_tokens > kMaxBlockTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block_tokens = %d is outside [0 (the library's choice), %d]", block_tokens,
                        kMaxBlockTokens));
  }
  if (kv_capacity_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_capacity_tokens = %d must be >= 0", kv_capacity_tokens));
  }
  if (kv_memory_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_memory_bytes = %d must be >= 0", kv_memory_bytes));
  }
  if (kv_memory_bytes > 0 && kv_capacity_tokens > 0) {
    return absl::InvalidArgumentError(
        "kv_capacity_tokens and kv_memory_bytes are both set: the one sizes the other");
  }
  if (max_context < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_context = %d must be >= 0", max_context));
  }
  if (micro_batches < 0 || micro_batches > kMaxMicroBatches) {
    return absl::InvalidArgumentError(
        absl::StrFormat("micro_batches = %d is outside [0, %d]", micro_batches, kMaxMicroBatches));
  }
  if (offload) PULSE_RETURN_IF_ERROR(offload->Validate());
  const int32_t budget = offload ? offload->selection.budget_tokens : 0;
  if (min_budget_tokens < 0 || min_budget_tokens > budget) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_budget_tokens = %d is outside [0, the offloaded selection's budget %d]",
        min_budget_tokens, budget));
  }
  return absl::OkStatus();
}

}  // namespace pulse
