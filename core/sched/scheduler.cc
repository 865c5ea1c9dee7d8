#include "core/sched/scheduler.h"

#include <algorithm>
#include <utility>

namespace pulse {

Scheduler::Scheduler(const SchedulerLimits& limits, int32_t num_blocks)
    : limits_(limits), pool_(num_blocks) {}

int32_t Scheduler::BlocksNeeded(const Request& request) const {
  return BlocksForTokens(request.max_kv_tokens(), limits_.block_tokens);
}

bool Scheduler::CanEverFit(const Request& request) const {
  return BlocksNeeded(request) <= pool_.capacity();
}

void Scheduler::Enqueue(std::shared_ptr<Request> request) { queue_.push_back(std::move(request)); }

std::vector<std::shared_ptr<Request>> Scheduler::Admit() {
  std::vector<std::shared_ptr<Request>> admitted;
  while (!queue_.empty() && running() < limits_.max_batch) {
    Request& request = *queue_.front();
    absl::StatusOr<BlockTable> blocks =
        BlockTable::Create(&pool_, limits_.block_tokens, request.max_kv_tokens());
    // The head waits for running requests to finish; the ones behind it wait their turn.
    if (!blocks.ok()) break;
    request.blocks = *std::move(blocks);
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
}

}  // namespace pulse
