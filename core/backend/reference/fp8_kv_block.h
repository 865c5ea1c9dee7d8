// A KV block (PagedKvLayout) stored as fp8 E4M3 with one fp32 scale per (K or V, KV head): the
// host tier's compressed form. Encoded: the scales, [2][num_kv_heads] (keys' then values'),
// padded to 16 bytes, then the codes in the block's own element order. A head's scale is its
// largest magnitude over 448; each value is stored as F32ToFp8E4m3(value * (448 / largest)) and
// read back as Fp8E4m3ToF32(code) * scale, rounded to the block's type. The reference every
// backend's encoder and decoder agree with bit for bit.
#pragma once

#include <cstdint>
#include <span>

#include "core/backend/paged_kv.h"

namespace pulse {

// Bytes of one encoded block of `layout` (whose type is f32 or bf16).
int64_t Fp8KvBlockBytes(const PagedKvLayout& layout);

// Encodes one block of `layout.type` (block_bytes() bytes) into `encoded` (Fp8KvBlockBytes).
void EncodeFp8KvBlock(const PagedKvLayout& layout, std::span<const std::byte> block,
                      std::span<std::byte> encoded);
// Decodes `encoded` into one block of `layout.type`.
void DecodeFp8KvBlock(const PagedKvLayout& layout, std::span<const std::byte> encoded,
                      std::span<std::byte> block);

}  // namespace pulse
