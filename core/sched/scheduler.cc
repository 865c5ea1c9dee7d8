#include "core/sched/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace pulse {

Scheduler::Scheduler(const SchedulerLimits& limits, int32_t num_blocks)
    : limits_(limits), pool_(num_blocks), host_pool_(limits.host_blocks) {}

int32_t Scheduler::ResidentLimit(const Request& request) const {
  const int32_t block_tokens = limits_.block_tokens;
  return BlocksForTokens(request.offload->sink_tokens, block_tokens) +
         BlocksForTokens(request.offload->window_tokens, block_tokens) + 2;
}

int32_t Scheduler::BlocksNeeded(const Request& request) const {
  if (!request.offload) return BlocksForTokens(request.max_kv_tokens(), limits_.block_tokens);
  return std::min(BlocksForTokens(request.max_kv_tokens(), limits_.block_tokens),
                  std::max(BlocksForTokens(request.prompt_tokens, limits_.block_tokens),
                           ResidentLimit(request)));
}

namespace {

// The most candidate blocks the request's selection picks in a step: its budget's, or all its
// context's when the budget covers it.
int32_t SlotBlocks(const Request& request, int32_t block_tokens) {
  return std::min(request.offload->budget_tokens, request.max_kv_tokens()) / block_tokens;
}

}  // namespace

absl::Status Scheduler::CanEverFit(const Request& request) const {
  const int32_t block_tokens = limits_.block_tokens;
  if (!request.offload && BlocksNeeded(request) > pool_.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request needs KV for %d tokens (%d blocks), more than the whole cache holds (%d "
        "blocks of %d tokens)",
        request.max_kv_tokens(), BlocksNeeded(request), pool_.capacity(), block_tokens));
  }
  if (request.offload && BlocksNeeded(request) > pool_.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request needs %d KV blocks of %d tokens resident at once (its prompt, or its sinks "
        "and window), more than the KV cache holds (%d)",
        BlocksNeeded(request), block_tokens, pool_.capacity()));
  }
  if (!request.offload) return absl::OkStatus();
  const int32_t host_blocks = BlocksForTokens(request.max_kv_tokens(), block_tokens);
  if (host_blocks > host_pool_.capacity()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the request needs KV for %d tokens (%d blocks), more than the host tier "
                        "holds (%d blocks)",
                        request.max_kv_tokens(), host_blocks, host_pool_.capacity()));
  }
  if (SlotBlocks(request, block_tokens) > limits_.slot_blocks) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request's budget of %d tokens selects up to %d blocks a step, more "
        "than the device tier's %d slots",
        request.offload->budget_tokens, SlotBlocks(request, block_tokens), limits_.slot_blocks));
  }
  return absl::OkStatus();
}

void Scheduler::Enqueue(std::shared_ptr<Request> request) { queue_.push_back(std::move(request)); }

std::vector<std::shared_ptr<Request>> Scheduler::Admit() {
  std::vector<std::shared_ptr<Request>> admitted;
  while (!queue_.empty() && running() < limits_.max_batch) {
    Request& request = *queue_.front();
    // The head waits for running requests to finish; the ones behind it wait their turn.
    if (request.offload) {
      const int32_t slots = SlotBlocks(request, limits_.block_tokens);
      if (slots_reserved_ + slots > limits_.slot_blocks) break;
      absl::StatusOr<OffloadedBlockTable> blocks =
          OffloadedBlockTable::Create(&pool_, &host_pool_, limits_.block_tokens,
                                      request.max_kv_tokens(), BlocksNeeded(request));
      if (!blocks.ok()) break;
      request.offloaded_blocks = *std::move(blocks);
      request.slot_blocks = slots;
      slots_reserved_ += slots;
    } else {
      absl::StatusOr<BlockTable> blocks =
          BlockTable::Create(&pool_, limits_.block_tokens, request.max_kv_tokens());
      if (!blocks.ok()) break;
      request.blocks = *std::move(blocks);
    }
    admitted.push_back(queue_.front());
    running_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return admitted;
}

std::vector<ScheduledSequence> Scheduler::FormBatch() const {
  std::vector<ScheduledSequence> batch;
  int32_t budget = limits_.max_step_tokens;
  for (const std::shared_ptr<Request>& request : running_) {
    if (!request->decoding()) continue;
    batch.push_back({request, request->computed, 1, /*decode=*/true, /*sample=*/true});
    --budget;
  }
  for (const std::shared_ptr<Request>& request : running_) {
    if (budget == 0) break;
    if (request->decoding()) continue;
    const int32_t count = std::min({request->uncomputed(), limits_.prefill_chunk, budget});
    batch.push_back({request, request->computed, count, /*decode=*/false,
                     /*sample=*/count == request->uncomputed()});
    budget -= count;
  }
  return batch;
}

void Scheduler::Remove(Request& request) {
  const auto same = [&request](const std::shared_ptr<Request>& r) { return r.get() == &request; };
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(), same), queue_.end());
  running_.erase(std::remove_if(running_.begin(), running_.end(), same), running_.end());
  request.blocks.reset();
  request.offloaded_blocks.reset();
  slots_reserved_ -= request.slot_blocks;
  request.slot_blocks = 0;
}

}  // namespace pulse
