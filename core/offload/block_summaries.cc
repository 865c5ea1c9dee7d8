#include "core/offload/block_summaries.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace pulse {

absl::StatusOr<BlockSummaries> BlockSummaries::Create(Backend& backend, const PagedKvLayout& layout,
                                                      int32_t num_layers, int32_t num_dense,
                                                      int32_t num_host, int32_t num_sets,
                                                      const BlockEstimator& estimator) {
  PULSE_RETURN_IF_ERROR(ValidateEstimator(estimator, layout));
  BlockSummaries summaries(backend, layout, num_dense, num_host,
                           ForBlocks(estimator, layout.block_tokens));
  const auto count = static_cast<size_t>(summaries.count());
  const size_t stamps_count = static_cast<size_t>(num_sets) * count;
  // "Never picked", uploaded a chunk at a time: the backend's memory bounds the stamps, and a
  // host copy of them all would not be (a host tier of many blocks asks for gigabytes).
  const std::vector<int32_t> never(std::min<size_t>(stamps_count, size_t{1} << 16), -1);
  for (int32_t layer = 0; layer < num_layers; ++layer) {
    PULSE_ASSIGN_OR_RETURN(
        DeviceBuffer buffer,
        backend.Allocate(count * static_cast<size_t>(SummaryBytes(layout, estimator))));
    summaries.summaries_.push_back(std::move(buffer));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer stamps, backend.Allocate(stamps_count * sizeof(int32_t)));
    for (size_t done = 0; done < stamps_count; done += never.size()) {
      const size_t chunk = std::min(never.size(), stamps_count - done);
      backend.CopyToDevice(stamps.as<int32_t>() + done, never.data(), chunk * sizeof(int32_t));
    }
    summaries.pick_stamps_.push_back(std::move(stamps));
  }
  return summaries;
}

void BlockSummaries::Summarize(int32_t layer, const void* layer_blocks, const int32_t* block_ids,
                               const int32_t* summary_ids, int32_t count) {
  backend_->SummarizeBlocks(layer_blocks, layout_, estimator_, block_ids, summary_ids, count,
                            summaries_[static_cast<size_t>(layer)].data());
}

}  // namespace pulse
