// A KV block (PagedKvLayout) in the host tier's fp8 form (HostCodec::kFp8E4m3,
// core/backend/kv_codec.h): a part is one KV head's keys or values, part p < num_kv_heads the keys
// of head p and num_kv_heads + h the values of head h. A part's scale is its largest magnitude
// over 448; each value is stored as F32ToFp8E4m3(value * (448 / largest)) and read back as
// Fp8E4m3ToF32(code) * scale, rounded to the block's type (f32 or bf16). The reference every
// backend's encoder and decoder agree with bit for bit.
#pragma once

#include <cstdint>
#include <span>

#include "core/backend/kv_codec.h"

namespace pulse {

// Encodes one block of `layout.type` (block_bytes() bytes) into `encoded`
// (HostBlockBytes(layout, HostCodec::kFp8E4m3) bytes).
void EncodeFp8KvBlock(const PagedKvLayout& layout, std::span<const std::byte> block,
                      std::span<std::byte> encoded);
// Decodes part `part` of `encoded` into its place in `block`, a block of `layout.type`.
void DecodeFp8KvPart(const PagedKvLayout& layout, std::span<const std::byte> encoded, int32_t part,
                     std::span<std::byte> block);
// Decodes every part.
void DecodeFp8KvBlock(const PagedKvLayout& layout, std::span<const std::byte> encoded,
                      std::span<std::byte> block);

}  // namespace pulse
