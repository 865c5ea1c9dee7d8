#include "core/backend/reference/fp8_kv_block.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/backend/bf16.h"
#include "core/backend/fp8.h"

namespace pulse {
namespace {

float Load(const PagedKvLayout& layout, const std::byte* block, int64_t i) {
  if (layout.type == DType::kBF16) {
    uint16_t bits;
    std::memcpy(&bits, block + i * 2, sizeof(bits));
    return Bf16ToF32(bits);
  }
  float value;
  std::memcpy(&value, block + i * 4, sizeof(value));
  return value;
}

void Store(const PagedKvLayout& layout, std::byte* block, int64_t i, float value) {
  if (layout.type == DType::kBF16) {
    const uint16_t bits = F32ToBf16(value);
    std::memcpy(block + i * 2, &bits, sizeof(bits));
  } else {
    std::memcpy(block + i * 4, &value, sizeof(value));
  }
}

}  // namespace

void EncodeFp8KvBlock(const PagedKvLayout& layout, std::span<const std::byte> block,
                      std::span<std::byte> encoded) {
  const int64_t head_elems = layout.head_elems();
  auto* codes = reinterpret_cast<uint8_t*>(encoded.data() + Fp8KvScaleBytes(layout));
  std::memset(encoded.data(), 0, static_cast<size_t>(Fp8KvScaleBytes(layout)));
  for (int32_t part = 0; part < 2 * layout.num_kv_heads; ++part) {
    const int64_t first = part * head_elems;
    float largest = 0;
    for (int64_t i = first; i < first + head_elems; ++i) {
      largest = std::max(largest, std::fabs(Load(layout, block.data(), i)));
    }
    const float scale = largest / kFp8E4m3Max;
    const float inverse = largest > 0 ? kFp8E4m3Max / largest : 0.0f;
    std::memcpy(encoded.data() + part * sizeof(float), &scale, sizeof(scale));
    for (int64_t i = first; i < first + head_elems; ++i) {
      codes[i] = F32ToFp8E4m3(Load(layout, block.data(), i) * inverse);
    }
  }
}

void DecodeFp8KvPart(const PagedKvLayout& layout, std::span<const std::byte> encoded, int32_t part,
                     std::span<std::byte> block) {
  // Every code's value, made once: the loops below then vectorize.
  static const std::array<float, 256> kValues = [] {
    std::array<float, 256> values{};
    for (int code = 0; code < 256; ++code) values[code] = Fp8E4m3ToF32(static_cast<uint8_t>(code));
    return values;
  }();
  const auto* codes = reinterpret_cast<const uint8_t*>(encoded.data() + Fp8KvScaleBytes(layout));
  float scale;
  std::memcpy(&scale, encoded.data() + part * sizeof(float), sizeof(scale));
  const int64_t first = part * layout.head_elems();
  const int64_t last = first + layout.head_elems();
  if (layout.type == DType::kBF16) {
    for (int64_t i = first; i < last; ++i)
      Store(layout, block.data(), i, kValues[codes[i]] * scale);
    return;
  }
  auto* out = reinterpret_cast<float*>(block.data());
  for (int64_t i = first; i < last; ++i) out[i] = kValues[codes[i]] * scale;
}

void DecodeFp8KvBlock(const PagedKvLayout& layout, std::span<const std::byte> encoded,
                      std::span<std::byte> block) {
  for (int32_t part = 0; part < 2 * layout.num_kv_heads; ++part) {
    DecodeFp8KvPart(layout, encoded, part, block);
  }
}

}  // namespace pulse
