// The fp8 host-tier form of a KV block (core/backend/reference/fp8_kv_block.h): its size, and a
// round trip that keeps each value to fp8's precision relative to its own head's scale.
#include "core/backend/reference/fp8_kv_block.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "core/backend/bf16.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

constexpr PagedKvLayout kLayout{.block_tokens = 8, .num_kv_heads = 3, .head_dim = 16};

// A block of `layout` whose (K or V, head) part p holds normal values of spread `spreads[p]`.
std::vector<float> Block(const PagedKvLayout& layout, const std::vector<float>& spreads) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> values(static_cast<size_t>(layout.block_elems()));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = normal(rng) * spreads[i / static_cast<size_t>(layout.head_elems())];
  }
  return values;
}

std::vector<float> RoundTrip(const PagedKvLayout& layout, const std::vector<float>& values) {
  std::vector<std::byte> encoded(static_cast<size_t>(HostBlockBytes(layout, HostCodec::kFp8E4m3)));
  std::vector<float> decoded(values.size());
  EncodeFp8KvBlock(layout, std::as_bytes(std::span(values)), encoded);
  DecodeFp8KvBlock(layout, encoded, std::as_writable_bytes(std::span(decoded)));
  return decoded;
}

TEST(Fp8KvBlockTest, AnEncodedBlockIsItsScalesPaddedTo16BytesThenAByteAValue) {
  EXPECT_EQ(HostBlockBytes(kLayout, HostCodec::kFp8E4m3), 32 + 2 * 3 * 8 * 16);  // 6 scales: 24 bytes, padded
  EXPECT_EQ(HostBlockBytes({.block_tokens = 8, .num_kv_heads = 8, .head_dim = 128},
                           HostCodec::kFp8E4m3),
            64 + 16384);  // Llama-3.1-8B's: half its bf16 block's 32 KiB, and 64 bytes
}

// Each part keeps fp8's 3 mantissa bits relative to its own largest value, whatever the other
// parts hold (spreads from 1e-3 to 1e3 in one block); a part's largest value comes back whole.
TEST(Fp8KvBlockTest, EachValueKeepsFp8PrecisionAgainstItsOwnHeadsScale) {
  const std::vector<float> spreads = {1e-3f, 1.0f, 1e3f, 0.5f, 20.0f, 3e-2f};
  const std::vector<float> values = Block(kLayout, spreads);
  const std::vector<float> decoded = RoundTrip(kLayout, values);
  const auto part_elems = static_cast<size_t>(kLayout.head_elems());
  for (size_t part = 0; part < spreads.size(); ++part) {
    float largest = 0;
    for (size_t i = part * part_elems; i < (part + 1) * part_elems; ++i) {
      largest = std::max(largest, std::fabs(values[i]));
    }
    const float scale = largest / 448.0f;
    for (size_t i = part * part_elems; i < (part + 1) * part_elems; ++i) {
      // Half a step of a 3-bit mantissa, or of the subnormals' 2^-9 at the bottom.
      const float bound = std::fabs(values[i]) / 16 * (1 + 1e-5f) + scale * 0x1p-10f;
      ASSERT_LE(std::fabs(decoded[i] - values[i]), bound) << "part " << part << " value " << i;
      if (std::fabs(values[i]) == largest) {
        EXPECT_NEAR(decoded[i], values[i], largest * 1e-6f);
      }
    }
  }
}

TEST(Fp8KvBlockTest, AHeadOfZerosComesBackZeros) {
  std::vector<float> values = Block(kLayout, {1, 1, 1, 1, 1, 1});
  std::fill(values.begin(), values.begin() + kLayout.head_elems(), 0.0f);
  const std::vector<float> decoded = RoundTrip(kLayout, values);
  for (int64_t i = 0; i < kLayout.head_elems(); ++i) EXPECT_EQ(decoded[i], 0.0f);
}

// A bf16 block decodes to bf16: the f32 block's decoded values rounded to bf16.
TEST(Fp8KvBlockTest, ABf16BlockDecodesToTheBf16OfTheF32Decoding) {
  PagedKvLayout bf16 = kLayout;
  bf16.type = DType::kBF16;
  const std::vector<float> wide = Block(kLayout, {1, 2, 3, 4, 5, 6});
  std::vector<uint16_t> narrow(wide.size());
  std::vector<float> widened(wide.size());
  for (size_t i = 0; i < wide.size(); ++i) {
    narrow[i] = F32ToBf16(wide[i]);
    widened[i] = Bf16ToF32(narrow[i]);
  }
  std::vector<std::byte> encoded(static_cast<size_t>(HostBlockBytes(bf16, HostCodec::kFp8E4m3)));
  std::vector<uint16_t> decoded(narrow.size());
  EncodeFp8KvBlock(bf16, std::as_bytes(std::span(narrow)), encoded);
  DecodeFp8KvBlock(bf16, encoded, std::as_writable_bytes(std::span(decoded)));
  const std::vector<float> want = RoundTrip(kLayout, widened);
  for (size_t i = 0; i < decoded.size(); ++i) ASSERT_EQ(decoded[i], F32ToBf16(want[i])) << i;
}

}  // namespace
}  // namespace pulse
