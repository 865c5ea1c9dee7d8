// For the accuracy tools' --host-codec fp8: KV blocks of a runner's cache replaced by what an fp8
// host tier gives back for them (core/backend/reference/fp8_kv_block.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/backend/reference/fp8_kv_block.h"
#include "core/base/status.h"
#include "core/model/forward.h"

namespace pulse {

// Blocks [first, end) of every layer of `runner`'s cache through the fp8 codec and back.
inline absl::Status RoundTripFp8(ModelRunner& runner, int32_t first, int32_t end) {
  if (first >= end) return absl::OkStatus();
  Backend& backend = runner.model().backend();
  const PagedKvLayout& layout = runner.cache().layout();
  const auto block_bytes = static_cast<size_t>(layout.block_bytes());
  std::vector<std::byte> blocks(static_cast<size_t>(end - first) * block_bytes);
  std::vector<std::byte> encoded(static_cast<size_t>(HostBlockBytes(layout, HostCodec::kFp8E4m3)));
  for (int32_t layer = 0; layer < runner.cache().num_layers(); ++layer) {
    auto* cache = static_cast<std::byte*>(runner.cache().layer(layer)) + first * block_bytes;
    PULSE_RETURN_IF_ERROR(backend.CopyToHost(blocks.data(), cache, blocks.size()));
    for (size_t at = 0; at < blocks.size(); at += block_bytes) {
      const std::span<std::byte> block = std::span(blocks).subspan(at, block_bytes);
      EncodeFp8KvBlock(layout, block, encoded);
      DecodeFp8KvBlock(layout, encoded, block);
    }
    backend.CopyToDevice(cache, blocks.data(), blocks.size());
  }
  return backend.Synchronize();
}

}  // namespace pulse
