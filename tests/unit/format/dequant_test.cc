#include "core/format/dequant.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

using ::testing::HasSubstr;

// IEEE binary16 by its definition, independently of HalfToFloat's bit manipulation.
double HalfByDefinition(uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

TEST(DequantTest, HalfToFloatIsExactForEveryValue) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float value = HalfToFloat(static_cast<uint16_t>(bits));
    const double expected = HalfByDefinition(static_cast<uint16_t>(bits));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(value)) << bits;
    } else {
      ASSERT_EQ(value, expected) << bits;
      ASSERT_EQ(std::signbit(value), std::signbit(expected)) << bits;
    }
  }
}

TEST(DequantTest, Bf16IsTheHighHalfOfAFloat) {
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xC040), -3.0f);
  EXPECT_EQ(Bf16ToFloat(0x0001), std::ldexp(1.0f, -133));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(0x7F80)));
}

TEST(DequantTest, TypeTablesMatchGgml) {
  EXPECT_EQ(GgmlTypeName(GgmlType::kQ4_1), "Q4_1");
  EXPECT_EQ(GgmlBlockElements(GgmlType::kQ6_K), 256);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ6_K), 210);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ4_K), 144);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ8_0), 34);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kBF16), 2);
  EXPECT_EQ(*GgmlTypeFromNumber(30), GgmlType::kBF16);
  EXPECT_THAT(GgmlTypeFromNumber(4).status().message(), HasSubstr("unknown ggml type 4"));
  EXPECT_FALSE(GgmlTypeFromNumber(31).ok());
}

TEST(DequantTest, TensorBytesChecksBlocksAndOverflow) {
  EXPECT_EQ(*TensorBytes(GgmlType::kQ4_1, 64), 40);
  EXPECT_EQ(*TensorBytes(GgmlType::kF16, 3), 6);
  EXPECT_THAT(TensorBytes(GgmlType::kQ4_1, 33).status().message(),
              HasSubstr("not a whole number of 32-value blocks"));
  EXPECT_FALSE(TensorBytes(GgmlType::kF32, -1).ok());
  EXPECT_THAT(TensorBytes(GgmlType::kF32, std::numeric_limits<int64_t>::max()).status().message(),
              HasSubstr("overflow"));
}

TEST(DequantTest, RejectsUnsupportedTypesAndSizeMismatch) {
  std::vector<std::byte> src(176);
  std::vector<float> dst(256);
  const absl::Status q5k = Dequantize(GgmlType::kQ5_K, src, dst);
  EXPECT_EQ(q5k.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(q5k.message(), HasSubstr("Q5_K"));
  std::vector<std::byte> short_src(33);
  std::vector<float> block(32);
  EXPECT_THAT(Dequantize(GgmlType::kQ8_0, short_src, block).message(),
              HasSubstr("32 values of Q8_0 take 34 bytes, got 33"));
  std::vector<float> partial(31);
  EXPECT_FALSE(Dequantize(GgmlType::kQ8_0, std::span(src).first(34), partial).ok());
}

std::vector<std::byte> Block(uint16_t d, std::initializer_list<uint16_t> more_halves,
                             const std::vector<uint8_t>& quants) {
  std::vector<std::byte> block;
  const auto put = [&block](uint16_t half) {
    block.push_back(static_cast<std::byte>(half & 0xFF));
    block.push_back(static_cast<std::byte>(half >> 8));
  };
  put(d);
  for (const uint16_t half : more_halves) put(half);
  for (const uint8_t q : quants) block.push_back(static_cast<std::byte>(q));
  return block;
}

TEST(DequantTest, DecodesQ8_0) {
  std::vector<uint8_t> quants(32);
  for (int j = 0; j < 32; ++j) quants[j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  std::vector<float> out(32);
  ASSERT_TRUE(Dequantize(GgmlType::kQ8_0, Block(0x3800, {}, quants), out).ok());  // d = 0.5
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j * 8 - 128) * 0.5f) << j;
}

TEST(DequantTest, DecodesQ4_0AndQ4_1NibblesInGgmlOrder) {
  std::vector<uint8_t> quants(16);
  for (int j = 0; j < 16; ++j) quants[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> out(32);
  ASSERT_TRUE(Dequantize(GgmlType::kQ4_0, Block(0x4000, {}, quants), out).ok());  // d = 2
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 2.0f) << j;
    EXPECT_EQ(out[j + 16], (15 - j - 8) * 2.0f) << j;
  }
  ASSERT_TRUE(Dequantize(GgmlType::kQ4_1, Block(0x3C00, {0xC200}, quants), out).ok());  // 1, -3
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], j - 3.0f) << j;
    EXPECT_EQ(out[j + 16], (15 - j) - 3.0f) << j;
  }
}

TEST(DequantTest, DecodesQ4_KWithUniformScales) {
  // d = 1, dmin = 0.5; every 6-bit scale 1 and min 2, so values are q - 1.
  std::vector<uint8_t> rest = {1, 1, 1, 1, 2, 2, 2, 2, 0x21, 0x21, 0x21, 0x21};
  for (int l = 0; l < 128; ++l) rest.push_back(static_cast<uint8_t>((l % 16) | ((l / 8) << 4)));
  std::vector<float> out(256);
  ASSERT_TRUE(Dequantize(GgmlType::kQ4_K, Block(0x3C00, {0x3800}, rest), out).ok());
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q = rest[12 + chunk * 32 + l];
      EXPECT_EQ(out[chunk * 64 + l], (q & 0xF) - 1.0f);
      EXPECT_EQ(out[chunk * 64 + 32 + l], (q >> 4) - 1.0f);
    }
  }
}

TEST(DequantTest, DecodesQ6_K) {
  std::vector<std::byte> block(210);
  for (int i = 0; i < 128; ++i) block[i] = std::byte{0x21};        // ql: low 1, high 2
  for (int i = 128; i < 192; ++i) block[i] = std::byte{0xFF};      // qh: 3 in every pair
  for (int i = 0; i < 16; ++i) block[192 + i] = std::byte(i + 1);  // scales 1..16
  block[208] = std::byte{0x00};                                    // d = 1.0 (0x3C00)
  block[209] = std::byte{0x3C};
  std::vector<float> out(256);
  ASSERT_TRUE(Dequantize(GgmlType::kQ6_K, block, out).ok());
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int scale = half * 8 + l / 16 + 1;
      EXPECT_EQ(out[half * 128 + l], scale * 17.0f);  // (1 | 3 << 4) - 32
      EXPECT_EQ(out[half * 128 + 32 + l], (scale + 2) * 17.0f);
      EXPECT_EQ(out[half * 128 + 64 + l], (scale + 4) * 18.0f);  // (2 | 3 << 4) - 32
      EXPECT_EQ(out[half * 128 + 96 + l], (scale + 6) * 18.0f);
    }
  }
}

}  // namespace
}  // namespace pulse
