// The host tier: pinned host memory (Backend::AllocateHost) holding the offloaded KV blocks of
// every layer, grown in chunks as admission reserves blocks, never pinned whole when the engine
// is made (pinning costs about 0.8 s a GiB, serializes the device's streams while it runs, and
// fails well below physical memory). A chunk holds blocks_per_chunk blocks of every layer; block
// b lives in chunk b / blocks_per_chunk. The chunks' addresses are mirrored in backend memory for
// the copy engine's kernels (HostTierView). Not thread-safe: the engine serializes it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend/backend.h"
#include "core/base/status.h"

namespace pulse {

class HostTier {
 public:
  // A tier of at most `max_blocks` blocks of `layout` for `num_layers` layers, each stored in
  // `codec`'s form (HostBlockBytes), pinned in chunks of about `chunk_bytes`; nothing is pinned
  // yet. InvalidArgument for sizes that are not positive, or fp8 of a layout neither f32 nor bf16.
  static absl::StatusOr<HostTier> Create(Backend& backend, const PagedKvLayout& layout,
                                         int32_t num_layers, int32_t max_blocks,
                                         int64_t chunk_bytes, HostCodec codec);

  // Makes blocks [0, blocks) addressable, pinning the chunks that are missing (between steps:
  // the mirror of the addresses is written on the compute stream). ResourceExhausted, keeping
  // what was pinned, when the backend cannot pin another chunk or pinning it would leave the
  // host less than 4 GiB available (AvailableHostMemoryBytes); InvalidArgument past max_blocks.
  absl::Status Reserve(int32_t blocks);

  int32_t capacity() const { return static_cast<int32_t>(chunks_.size()) * blocks_per_chunk_; }
  int32_t max_blocks() const { return max_blocks_; }
  int32_t blocks_per_chunk() const { return blocks_per_chunk_; }
  int64_t pinned_bytes() const;
  HostCodec codec() const { return codec_; }
  // Bytes of one block of one layer in the tier's form.
  int64_t block_bytes() const { return HostBlockBytes(layout_, codec_); }
  // For the backend's ops: the mirror of the chunks' addresses.
  HostTierView view() const;
  // Where block `block` (< capacity()) of `layer` lives, on the host.
  char* block(int32_t layer, int32_t block) const;

 private:
  HostTier(Backend& backend, const PagedKvLayout& layout, int32_t num_layers, int32_t max_blocks,
           int32_t blocks_per_chunk, DeviceBuffer mirror, HostCodec codec);

  Backend* backend_;
  PagedKvLayout layout_;
  int32_t num_layers_;
  int32_t max_blocks_;
  int32_t blocks_per_chunk_;
  DeviceBuffer mirror_;  // uint64 [max chunks]: each chunk's address
  HostCodec codec_;
  std::vector<HostBuffer> chunks_;
  std::vector<uint64_t> addresses_;  // the host's copy of the mirror
};

}  // namespace pulse
