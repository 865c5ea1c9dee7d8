#include "core/kv/kv_cache.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace pulse {

absl::StatusOr<KvCache> KvCache::Create(Backend& backend, const PagedKvLayout& layout,
                                        int32_t num_layers, int32_t num_blocks) {
  if (layout.block_tokens <= 0 || layout.num_kv_heads <= 0 || layout.head_dim <= 0 ||
      num_layers <= 0 || num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache of %d layers x %d blocks of %d tokens x %d heads x %d dims", num_layers,
        num_blocks, layout.block_tokens, layout.num_kv_heads, layout.head_dim));
  }
  if (layout.type != backend.kv_type()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache of %s on a backend whose KV cache is %s", DTypeName(layout.type),
                        DTypeName(backend.kv_type())));
  }
  // Checked: block_elems() of absurd int32 sizes overflows int64.
  size_t layer_bytes = 2 * DTypeBytes(layout.type);
  for (const int32_t factor :
       {layout.block_tokens, layout.num_kv_heads, layout.head_dim, num_blocks}) {
    if (__builtin_mul_overflow(layer_bytes, static_cast<size_t>(factor), &layer_bytes)) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "KV cache of %d blocks of %d tokens x %d heads x %d dims per layer is too large",
          num_blocks, layout.block_tokens, layout.num_kv_heads, layout.head_dim));
    }
  }
  std::vector<DeviceBuffer> layers;
  layers.reserve(static_cast<size_t>(num_layers));
  for (int32_t l = 0; l < num_layers; ++l) {
    absl::StatusOr<DeviceBuffer> buffer = backend.Allocate(layer_bytes);
    if (!buffer.ok()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot allocate the KV cache (%d layers x %d bytes, %d blocks of %d tokens): %s",
          num_layers, layer_bytes, num_blocks, layout.block_tokens, buffer.status().message()));
    }
    layers.push_back(*std::move(buffer));
  }
  return KvCache(layout, num_blocks, layer_bytes, std::move(layers));
}

}  // namespace pulse
