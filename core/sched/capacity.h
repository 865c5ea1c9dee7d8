// The engine's caches sized from its options and the backend's memory: every 0 of EngineOptions
// resolved (engine.h gives the defaults), the scheduler's limits, and the KV cache (the dense
// blocks, then the offload slots) with the runner over it. A model over several ranks gives each
// rank a cache and tiers of the same blocks, of its own KV heads, sized by rank 0's memory: the
// sizes and bytes here are a rank's.
#pragma once

#include <cstdint>
#include <memory>

#include "core/base/status.h"
#include "core/model/model.h"
#include "core/model/parallel_runner.h"
#include "core/sched/engine.h"
#include "core/sched/scheduler.h"

namespace pulse {

struct EngineCapacity {
  EngineOptions options;  // with every 0 resolved
  SchedulerLimits limits;
  int32_t dense_blocks = 0;  // the blocks of the runner's cache that are not offload slots
  // Device bytes of the KV: the cache's blocks and slots, and (with offload) the summaries of
  // the host tier's blocks and the staging area.
  int64_t kv_memory_bytes = 0;
  ParallelRunner runner;
};

// `options` must be valid (EngineOptions::Validate). InvalidArgument for a max_context the model
// cannot take, a sparse_attention the block selector refuses, or more blocks than an int32_t
// counts; ResourceExhausted when the KV cache or the runner's scratch does not fit the backend.
absl::StatusOr<EngineCapacity> AllocateCapacity(const ShardedModel& model,
                                                const EngineOptions& options);

}  // namespace pulse
