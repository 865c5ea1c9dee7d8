#include "core/offload/host_tier.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/base/host_memory.h"

namespace pulse {
namespace {

// Host memory the tier leaves to everything else: pinning the last of it makes the kernel kill a
// process (this one, most likely) instead of failing the pin.
constexpr int64_t kHostHeadroomBytes = int64_t{4} << 30;

}  // namespace

absl::StatusOr<HostTier> HostTier::Create(Backend& backend, const PagedKvLayout& layout,
                                          int32_t num_layers, int32_t max_blocks,
                                          int64_t chunk_bytes, HostCodec codec) {
  const int64_t layered_block = int64_t{num_layers} * HostBlockBytes(layout, codec);
  if (num_layers < 1 || max_blocks < 1 || chunk_bytes < 1 || layered_block < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("host tier of %d blocks of %d bytes for %d layers, in chunks of %d bytes",
                        max_blocks, HostBlockBytes(layout, codec), num_layers, chunk_bytes));
  }
  if (!HostCodecStores(codec, layout)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host tier: no form %d of %s blocks", static_cast<int>(codec), DTypeName(layout.type)));
  }
  const auto blocks_per_chunk = static_cast<int32_t>(
      std::clamp<int64_t>(chunk_bytes / layered_block, 1, int64_t{max_blocks}));
  const int64_t max_chunks = (int64_t{max_blocks} + blocks_per_chunk - 1) / blocks_per_chunk;
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer mirror,
                         backend.Allocate(static_cast<size_t>(max_chunks) * sizeof(uint64_t)));
  return HostTier(backend, layout, num_layers, max_blocks, blocks_per_chunk, std::move(mirror),
                  codec);
}

HostTier::HostTier(Backend& backend, const PagedKvLayout& layout, int32_t num_layers,
                   int32_t max_blocks, int32_t blocks_per_chunk, DeviceBuffer mirror,
                   HostCodec codec)
    : backend_(&backend),
      layout_(layout),
      num_layers_(num_layers),
      max_blocks_(max_blocks),
      blocks_per_chunk_(blocks_per_chunk),
      mirror_(std::move(mirror)),
      codec_(codec) {}

absl::Status HostTier::Reserve(int32_t blocks) {
  if (blocks > max_blocks_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("host tier: %d blocks asked for, at most %d", blocks, max_blocks_));
  }
  const size_t first_new = chunks_.size();
  const auto chunk_bytes =
      static_cast<size_t>(int64_t{num_layers_} * blocks_per_chunk_ * block_bytes());
  while (capacity() < blocks) {
    if (const std::optional<int64_t> available = AvailableHostMemoryBytes();
        available && static_cast<int64_t>(chunk_bytes) + kHostHeadroomBytes > *available) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the host tier cannot grow past %d blocks (%d bytes pinned): a chunk of %d bytes would "
          "leave less than %d of the host's %d bytes available",
          capacity(), pinned_bytes(), chunk_bytes, kHostHeadroomBytes, *available));
    }
    absl::StatusOr<HostBuffer> chunk = backend_->AllocateHost(chunk_bytes);
    if (!chunk.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("the host tier cannot grow past %d blocks (%d bytes pinned): %s",
                          capacity(), pinned_bytes(), chunk.status().message()));
    }
    addresses_.push_back(reinterpret_cast<uint64_t>(chunk->data()));
    chunks_.push_back(*std::move(chunk));
  }
  if (chunks_.size() > first_new) {
    backend_->CopyToDevice(mirror_.as<uint64_t>() + first_new, addresses_.data() + first_new,
                           (chunks_.size() - first_new) * sizeof(uint64_t));
  }
  return absl::OkStatus();
}

int64_t HostTier::pinned_bytes() const {
  int64_t bytes = 0;
  for (const HostBuffer& chunk : chunks_) bytes += static_cast<int64_t>(chunk.bytes());
  return bytes;
}

HostTierView HostTier::view() const {
  return {.chunks = mirror_.as<const uint64_t>(),
          .blocks_per_chunk = blocks_per_chunk_,
          .num_blocks = capacity(),
          .codec = codec_};
}

char* HostTier::block(int32_t layer, int32_t block) const {
  const HostTierView host{
      .chunks = addresses_.data(), .blocks_per_chunk = blocks_per_chunk_, .num_blocks = capacity()};
  return HostTierBlock(host, layer, block_bytes(), block);
}

}  // namespace pulse
