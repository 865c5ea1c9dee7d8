// How the host tier stores a KV block (PagedKvLayout): as the device does, or compressed to fp8
// E4M3 with a scale per (K or V, KV head) (core/backend/reference/fp8_kv_block.h). The recall
// decodes and the write-back encodes; summaries are computed from the device's exact blocks.
// (C++17: kernels include it.)
#pragma once

#include <cstdint>

#include "core/backend/paged_kv.h"

namespace pulse {

enum class HostCodec : uint8_t {
  kRaw,      // the device's bytes
  kFp8E4m3,  // fp32 scales [2][num_kv_heads] (keys', values'), padded to 16 bytes; a byte a value
};

// Bytes of the fp8 form's scales, padded so that its codes start 16-byte aligned.
PULSE_HOST_DEVICE inline int64_t Fp8KvScaleBytes(const PagedKvLayout& layout) {
  return (2 * int64_t{layout.num_kv_heads} * 4 + 15) / 16 * 16;
}

// Bytes of one block of `layout` in the host tier's form.
PULSE_HOST_DEVICE inline int64_t HostBlockBytes(const PagedKvLayout& layout, HostCodec codec) {
  return codec == HostCodec::kRaw ? layout.block_bytes()
                                  : Fp8KvScaleBytes(layout) + layout.block_elems();
}

}  // namespace pulse
