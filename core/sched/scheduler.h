// Admission and batch formation (engine.h describes the policy). Owns the KV block pool and the
// queued and running requests; guarded by the engine's lock.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/sched/request.h"

namespace pulse {

struct SchedulerLimits {
  int32_t max_batch = 0;
  int32_t prefill_chunk = 0;
  int32_t max_step_tokens = 0;
  int32_t block_tokens = 0;
};

// One request's share of a step: its tokens [begin, begin + count) are fed to the model.
struct ScheduledSequence {
  std::shared_ptr<Request> request;
  int32_t begin = 0;
  int32_t count = 0;
  bool decode = false;  // the one new token of a decoding request (else a prompt chunk)
  bool sample = false;  // the chunk ends the request's tokens: its last row's logits are sampled
};

class Scheduler {
 public:
  Scheduler(const SchedulerLimits& limits, int32_t num_blocks);

  const BlockPool& pool() const { return pool_; }
  // KV blocks the request's worst case takes.
  int32_t BlocksNeeded(const Request& request) const;
  // Whether the request could run in an otherwise empty cache.
  bool CanEverFit(const Request& request) const;

  void Enqueue(std::shared_ptr<Request> request);
  // Admits queued requests in order while the batch has room and their KV can be reserved;
  // returns them (now holding their BlockTable).
  std::vector<std::shared_ptr<Request>> Admit();
  // This step's work: one token for every decoding request, then prompt chunks of the
  // prefilling requests in admission order within the step's token budget.
  std::vector<ScheduledSequence> FormBatch() const;
  // Takes the request out of the queue or the running set and frees its KV blocks.
  void Remove(Request& request);

  int32_t queued() const { return static_cast<int32_t>(queue_.size()); }
  int32_t running() const { return static_cast<int32_t>(running_.size()); }

 private:
  const SchedulerLimits limits_;
  BlockPool pool_;
  std::deque<std::shared_ptr<Request>> queue_;
  std::vector<std::shared_ptr<Request>> running_;  // in admission order
};

}  // namespace pulse
