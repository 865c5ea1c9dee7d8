// The runner of a model split over ranks (docs/design/tensor-parallel.md): one ModelRunner a
// rank, over its shard of the weights and its own KV cache, offload tiers and backend, each
// driven by a thread of its own through the same calls; the ranks meet in their runners'
// collectives. One rank runs on the calling thread alone, exactly as its ModelRunner does.
// Not thread-safe: one call at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "core/base/status.h"
#include "core/model/forward.h"

namespace pulse {

class RankThreads;

class ParallelRunner {
 public:
  // `ranks[r]` is rank r's runner: a runner of a whole model, or of shard r of `ranks.size()`
  // ranks with its communicator (ModelRunner::Create). InvalidArgument for an empty list, ranks
  // out of order, or runners whose options, shards' models or caches do not match.
  static absl::StatusOr<ParallelRunner> Create(std::vector<ModelRunner> ranks);
  ParallelRunner(ParallelRunner&&) noexcept;
  ParallelRunner& operator=(ParallelRunner&&) noexcept;
  ~ParallelRunner();

  int32_t size() const { return static_cast<int32_t>(ranks_.size()); }
  // Rank 0's runner, which answers for all where they agree: the options, the model's config,
  // the cache's layout and block counts (its KV heads are rank 0's).
  const ModelRunner& leader() const { return ranks_.front(); }
  // Rank 0's runner to change between steps (a tool's edit of its cache, say), which only a
  // runner of one rank may do without leaving its peers behind.
  ModelRunner& leader() { return ranks_.front(); }

  // ModelRunner::Forward and ForwardAndSample on rank 0 and ForwardAsPeer on the others, at
  // once; rank 0's logits or tokens come back (every rank holds the gathered logits). A rank that
  // fails aborts the others' collectives: the step fails with the first failure that is not the
  // abort itself.
  absl::Status Forward(const StepBatch& batch, std::span<float> logits, int32_t micro_batches = 1);
  absl::Status ForwardAndSample(const StepBatch& batch, std::span<const TokenSampling> sampling,
                                std::span<const int32_t> penalised_ids, std::span<int32_t> tokens,
                                int32_t micro_batches = 1);

  // The calls between steps, on every rank in turn (the first failure returned at once).
  absl::Status ForgetSparse(uint64_t key);
  absl::Status MoveToHost(std::span<const int32_t> device_blocks,
                          std::span<const int32_t> host_blocks);
  absl::Status MoveToDevice(std::span<const int32_t> host_blocks,
                            std::span<const int32_t> device_blocks);
  absl::Status FreeSlots(std::span<const int32_t> host_blocks);
  // Makes host blocks [0, blocks) addressable in every rank's host tier (HostTier::Reserve);
  // OK without offloaded KV.
  absl::Status ReserveHostBlocks(int32_t blocks);
  // The slowest rank's host -> device link (ModelRunner::CalibrateLink): each rank recalls its
  // heads' share of the same blocks over its own link, so the slowest sets the pace.
  absl::StatusOr<double> CalibrateLink(int64_t bytes);
  bool has_host_tier() const { return leader().host_tier() != nullptr; }

  // Rank 0's statistics, of its KV heads: with SoloHead every rank picks the same blocks, so the
  // selection counts are the whole engine's and the bytes a rank's share; with a set a KV head
  // the counts too are rank 0's sets'.
  SparseAttentionStats sparse_stats() const { return leader().sparse_stats(); }
  SparseAttentionStats sparse_stats(uint64_t key) const { return leader().sparse_stats(key); }
  OffloadStats offload_stats() const { return leader().offload_stats(); }
  const GraphStats& graph_stats() const { return leader().graph_stats(); }
  // The most host waits of a rank in the last step (ModelRunner::step_host_waits).
  int64_t step_host_waits() const;
  int32_t step_micro_batches() const { return leader().step_micro_batches(); }
  bool step_first_of_shape() const { return leader().step_first_of_shape(); }

 private:
  ParallelRunner(std::vector<ModelRunner> ranks, std::unique_ptr<RankThreads> threads);
  // Runs step(rank) on every rank at once (rank 0 on the calling thread); see Forward.
  absl::Status OnEveryRank(absl::FunctionRef<absl::Status(ModelRunner&, int32_t)> step);
  // Runs call(rank) on every rank in turn, stopping at the first failure.
  absl::Status EachRank(absl::FunctionRef<absl::Status(ModelRunner&)> call);

  std::vector<ModelRunner> ranks_;
  std::unique_ptr<RankThreads> threads_;  // ranks 1.. (null at one rank)
  std::vector<absl::Status> statuses_;    // each rank's in the last step
};

}  // namespace pulse
