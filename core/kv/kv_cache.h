// The memory of a paged KV cache: per layer one backend buffer of num_blocks blocks laid out as
// PagedKvLayout says (elements of layout.type, which must be the backend's kv_type()). Which
// sequence owns which block is the BlockPool's and BlockTable's job.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/backend/backend.h"
#include "core/base/status.h"

namespace pulse {

class KvCache {
 public:
  // ResourceExhausted when the backend cannot provide the memory (or its size overflows).
  static absl::StatusOr<KvCache> Create(Backend& backend, const PagedKvLayout& layout,
                                        int32_t num_layers, int32_t num_blocks);

  const PagedKvLayout& layout() const { return layout_; }
  int32_t num_layers() const { return static_cast<int32_t>(layers_.size()); }
  int32_t num_blocks() const { return num_blocks_; }
  void* layer(int32_t index) const { return layers_[static_cast<size_t>(index)].data(); }
  size_t layer_bytes() const { return layer_bytes_; }

 private:
  KvCache(const PagedKvLayout& layout, int32_t num_blocks, size_t layer_bytes,
          std::vector<DeviceBuffer> layers)
      : layout_(layout),
        num_blocks_(num_blocks),
        layer_bytes_(layer_bytes),
        layers_(std::move(layers)) {}

  PagedKvLayout layout_;
  int32_t num_blocks_ = 0;
  size_t layer_bytes_ = 0;
  std::vector<DeviceBuffer> layers_;
};

}  // namespace pulse
