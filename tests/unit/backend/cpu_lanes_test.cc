// The CPU kernels' building blocks: the documented summation order and the vectorizable Exp.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/cpu_level.h"
#include "core/backend/cpu/exp.h"
#include "core/backend/cpu/lanes.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"

namespace pulse::cpu {
namespace {

using ::pulse::testing::BitwiseEqual;
using ::pulse::testing::RandomValues;

// The order lanes.h documents, written out scalar by scalar; `fused`: each multiply-add rounded
// once (the levels with FMA) rather than twice (the generic level).
float DocumentedDot(const float* a, const float* b, int64_t n, bool fused) {
  float lanes[kLanes] = {};
  for (int64_t i = 0; i < n; ++i) {
    float& lane = lanes[i % kLanes];
    lane = fused ? std::fma(a[i], b[i], lane) : a[i] * b[i] + lane;
  }
  float half[8];
  for (int l = 0; l < 8; ++l) half[l] = lanes[l] + lanes[l + 8];
  float quarter[4];
  for (int l = 0; l < 4; ++l) quarter[l] = half[l] + half[l + 4];
  return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

// This file is compiled as the generic level (kernel_target.h): its Dot rounds twice.
TEST(LanesTest, DotAndSumFollowTheDocumentedOrder) {
  for (int64_t n : {0, 1, 7, 16, 17, 64, 65, 577}) {
    const std::vector<float> a = RandomValues(n, 1);
    const std::vector<float> b = RandomValues(n, 2);
    const std::vector<float> ones(n, 1.0f);
    EXPECT_TRUE(
        BitwiseEqual(Dot(a.data(), b.data(), n), DocumentedDot(a.data(), b.data(), n, false)))
        << "n " << n;
    EXPECT_TRUE(BitwiseEqual(Sum(a.data(), n), DocumentedDot(a.data(), ones.data(), n, true)))
        << "n " << n;
  }
}

// Every level's GEMM element is the documented sum of its level.
TEST(LanesTest, GemmElementsAreDots) {
  constexpr int64_t kM = 6, kK = 577, kN = 9;
  const std::vector<float> x = RandomValues(kM * kK, 3);
  const std::vector<float> w = RandomValues(kN * kK, 4);
  for (const CpuLevel level : {CpuLevel::kGeneric, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (!CpuLevelSupported(level)) continue;
    SCOPED_TRACE(CpuLevelName(level));
    absl::StatusOr<std::shared_ptr<Backend>> backend =
        CreateCpuBackend({.threads = 2, .kernel_level = level});
    ASSERT_TRUE(backend.ok()) << backend.status();
    absl::StatusOr<Weight> weight = (*backend)->UploadWeight(w, kN, kK, DType::kF32);
    ASSERT_TRUE(weight.ok());
    std::vector<float> y(kM * kN);
    (*backend)->Gemm(x.data(), kM, weight->view(), nullptr, y.data());
    for (int64_t i = 0; i < kM; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        EXPECT_TRUE(BitwiseEqual(y[i * kN + j], DocumentedDot(x.data() + i * kK, w.data() + j * kK,
                                                              kK, level != CpuLevel::kGeneric)))
            << "row " << i << " col " << j;
      }
    }
  }
}

int64_t UlpDistance(float a, float b) {
  return std::abs(int64_t{std::bit_cast<int32_t>(a)} - int64_t{std::bit_cast<int32_t>(b)});
}

TEST(ExpTest, WithinTwoUlpOfStdExp) {
  int64_t worst = 0;
  float worst_x = 0;
  for (float x = -87.0f; x < 88.3f; x += 0.000173f) {
    const int64_t ulp = UlpDistance(Exp(x), std::exp(x));
    if (ulp > worst) {
      worst = ulp;
      worst_x = x;
    }
  }
  EXPECT_LE(worst, 2) << "at x = " << worst_x;
  EXPECT_EQ(Exp(0.0f), 1.0f);
  EXPECT_EQ(Exp(-0.0f), 1.0f);
}

TEST(ExpTest, SaturatesOutsideTheNormalRange) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Exp(-inf), 0.0f);
  EXPECT_EQ(Exp(-100.0f), 0.0f);
  EXPECT_EQ(Exp(inf), inf);
  EXPECT_EQ(Exp(100.0f), inf);
  EXPECT_TRUE(std::isnan(Exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_LE(UlpDistance(Exp(88.37f), std::exp(88.37f)), 2);
  EXPECT_LE(UlpDistance(Exp(-87.33f), std::exp(-87.33f)), 2);
}

}  // namespace
}  // namespace pulse::cpu
