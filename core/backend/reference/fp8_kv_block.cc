#include "core/backend/reference/fp8_kv_block.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/backend/bf16.h"
#include "core/backend/fp8.h"

namespace pulse {
void EncodeFp8KvBlock(const PagedKvLayout& layout, std::span<const std::byte> block,
                      std::span<std::byte> encoded) {
  const int64_t head_elems = layout.head_elems();
  auto* codes = reinterpret_cast<uint8_t*>(encoded.data() + Fp8KvScaleBytes(layout));
  std::memset(encoded.data(), 0, static_cast<size_t>(Fp8KvScaleBytes(layout)));
  // A part's values as f32, then its largest magnitude and codes: loops without branches, which
  // the compiler vectorizes.
  std::vector<float> values(static_cast<size_t>(head_elems));
  for (int32_t part = 0; part < 2 * layout.num_kv_heads; ++part) {
    const int64_t first = part * head_elems;
    if (layout.type == DType::kBF16) {
      const auto* bits = reinterpret_cast<const uint16_t*>(block.data()) + first;
      for (int64_t i = 0; i < head_elems; ++i) values[static_cast<size_t>(i)] = Bf16ToF32(bits[i]);
    } else {
      std::memcpy(values.data(), block.data() + first * 4, static_cast<size_t>(head_elems) * 4);
    }
    // The largest magnitude but NaN's, compared as bits (ordered as the magnitudes are), in
    // independent lanes that the compiler vectorizes.
    constexpr size_t kLanes = 16;
    std::array<int32_t, kLanes> lanes{};
    const auto take = [](int32_t& lane, float value) {
      const int32_t magnitude = std::bit_cast<int32_t>(value) & 0x7FFFFFFF;
      lane = std::max(lane, magnitude > 0x7F800000 ? 0 : magnitude);
    };
    const size_t whole = values.size() / kLanes * kLanes;
    for (size_t i = 0; i < whole; i += kLanes) {
      for (size_t k = 0; k < kLanes; ++k) take(lanes[k], values[i + k]);
    }
    for (size_t i = whole; i < values.size(); ++i) take(lanes[0], values[i]);
    const auto largest = std::bit_cast<float>(*std::ranges::max_element(lanes));
    const float scale = largest / kFp8E4m3Max;
    const float inverse = largest > 0 ? kFp8E4m3Max / largest : 0.0f;
    std::memcpy(encoded.data() + part * sizeof(float), &scale, sizeof(scale));
    for (int64_t i = 0; i < head_elems; ++i) {
      codes[first + i] = F32ToFp8E4m3(values[static_cast<size_t>(i)] * inverse);
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
    auto* out = reinterpret_cast<uint16_t*>(block.data());
    for (int64_t i = first; i < last; ++i) out[i] = F32ToBf16(kValues[codes[i]] * scale);
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
