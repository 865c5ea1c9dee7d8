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

// Bytes of one KV head's keys and values of a block in the host tier's form (with their two
// scales in the fp8 form): what a head-wise recall of the block reads.
PULSE_HOST_DEVICE inline int64_t HostHeadBytes(const PagedKvLayout& layout, HostCodec codec) {
  return codec == HostCodec::kRaw
             ? 2 * layout.head_elems() * static_cast<int64_t>(DTypeBytes(layout.type))
             : 2 * layout.head_elems() + 2 * static_cast<int64_t>(sizeof(float));
}

// Whether `codec` stores blocks of `layout`: the raw form any, fp8 those of f32 or bf16 values.
PULSE_HOST_DEVICE inline bool HostCodecStores(HostCodec codec, const PagedKvLayout& layout) {
  return codec == HostCodec::kRaw || (codec == HostCodec::kFp8E4m3 &&
                                      (layout.type == DType::kF32 || layout.type == DType::kBF16));
}

}  // namespace pulse
