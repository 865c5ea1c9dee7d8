// The Quest summaries that sparse rows score, a layer each: one for each of `num_dense` blocks of
// the dense pool (summary id b for dense block b; SparseAttention keeps them only without a host
// tier) and one for every host-tier block (num_dense + h for host block h), written by the step
// that fills the block. Beside them, per selection set, the step that last picked each summary's
// block (Backend::BuildSparseTables counts a pick as reused when it is the step before).
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend/backend.h"
#include "core/base/status.h"

namespace pulse {

class BlockSummaries {
 public:
  // Summaries of `layout`'s blocks under `estimator` for `num_layers` layers, with pick stamps
  // for up to `num_sets` selection sets. InvalidArgument for an estimator that does not fit the
  // layout; ResourceExhausted when they do not fit the backend.
  static absl::StatusOr<BlockSummaries> Create(Backend& backend, const PagedKvLayout& layout,
                                               int32_t num_layers, int32_t num_dense,
                                               int32_t num_host, int32_t num_sets,
                                               const BlockEstimator& estimator);

  int32_t dense_id(int32_t block) const { return block; }
  int32_t host_id(int32_t block) const { return num_dense_ + block; }
  int32_t count() const { return num_dense_ + num_host_; }
  const BlockEstimator& estimator() const { return estimator_; }
  const void* layer(int32_t layer) const { return summaries_[static_cast<size_t>(layer)].data(); }
  int32_t* pick_stamps(int32_t layer) const {
    return pick_stamps_[static_cast<size_t>(layer)].as<int32_t>();
  }
  // Enqueues the summaries of the `count` blocks block_ids[i] of the layer's cache into
  // summary_ids[i] (backend memory; a negative block id is padding).
  void Summarize(int32_t layer, const void* layer_blocks, const int32_t* block_ids,
                 const int32_t* summary_ids, int32_t count);

 private:
  BlockSummaries(Backend& backend, const PagedKvLayout& layout, int32_t num_dense, int32_t num_host,
                 const BlockEstimator& estimator)
      : backend_(&backend),
        layout_(layout),
        num_dense_(num_dense),
        num_host_(num_host),
        estimator_(estimator) {}

  Backend* backend_;
  PagedKvLayout layout_;
  int32_t num_dense_;
  int32_t num_host_;
  BlockEstimator estimator_;
  std::vector<DeviceBuffer> summaries_;    // [layers]: [count][SummaryBytes]
  std::vector<DeviceBuffer> pick_stamps_;  // [layers]: int32 [sets][count], -1 never picked
};

}  // namespace pulse
