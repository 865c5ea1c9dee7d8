// The CPU backend's dense ops against naive double-precision references.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"

namespace pulse {
namespace {

using ::pulse::testing::ExpectBitwiseEqual;
using ::pulse::testing::MakeCpuBackend;
using ::pulse::testing::Poisoned;
using ::pulse::testing::RandomValues;
using ::pulse::testing::RoundToBf16;

constexpr double kTolerance = 1e-5;

// Expects |actual - expected| <= kTolerance * scale[i] (scale: the magnitude the error is
// relative to, e.g. sum |x*w| of a dot product).
void ExpectClose(const std::vector<float>& actual, const std::vector<double>& expected,
                 const std::vector<double>& scale) {
  ASSERT_EQ(actual.size(), expected.size());
  int failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(error <= kTolerance * scale[i]) && failures++ < 5) {
      ADD_FAILURE() << "element " << i << ": " << actual[i] << " vs " << expected[i];
    }
  }
  EXPECT_EQ(failures, 0);
}

// Relative to each element's own magnitude: for ops without cancellation.
void ExpectRelativelyClose(const std::vector<float>& actual, const std::vector<double>& expected) {
  std::vector<double> scale(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) scale[i] = std::max(std::abs(expected[i]), 1e-30);
  ExpectClose(actual, expected, scale);
}

struct GemmCase {
  int64_t m;
  int64_t k;
  int64_t n;
};

std::vector<GemmCase> GemmCases() {
  std::vector<GemmCase> cases;
  for (int64_t m : {1, 3, 17, 70}) {
    for (int64_t k : {1, 7, 64, 65, 577}) {
      for (int64_t n : {1, 5, 33, 130}) cases.push_back({m, k, n});
    }
  }
  return cases;
}

class GemmTest : public ::testing::TestWithParam<DType> {};

TEST_P(GemmTest, MatchesReference) {
  const DType type = GetParam();
  auto backend = MakeCpuBackend(2);
  uint32_t seed = 100;
  for (const GemmCase& c : GemmCases()) {
    SCOPED_TRACE(::testing::Message() << "m " << c.m << " k " << c.k << " n " << c.n);
    const std::vector<float> x = RandomValues(c.m * c.k, ++seed);
    std::vector<float> w = RandomValues(c.n * c.k, ++seed);
    const std::vector<float> bias = RandomValues(c.n, ++seed);
    absl::StatusOr<Weight> weight = backend->UploadWeight(w, c.n, c.k, type);
    ASSERT_TRUE(weight.ok()) << weight.status();
    if (type == DType::kBF16) w = RoundToBf16(w);

    for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
      std::vector<double> expected(c.m * c.n);
      std::vector<double> scale(c.m * c.n);
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double sum = b != nullptr ? b[j] : 0.0;
          double magnitude = b != nullptr ? std::abs(b[j]) : 0.0;
          for (int64_t p = 0; p < c.k; ++p) {
            const double term = double{x[i * c.k + p]} * w[j * c.k + p];
            sum += term;
            magnitude += std::abs(term);
          }
          expected[i * c.n + j] = sum;
          scale[i * c.n + j] = magnitude;
        }
      }
      std::vector<float> y = Poisoned(c.m * c.n);
      backend->Gemm(x.data(), c.m, weight->view(), b, y.data());
      ExpectClose(y, expected, scale);
    }
  }
}

TEST_P(GemmTest, RowsDoNotDependOnTheBatchOrThreads) {
  const DType type = GetParam();
  auto one_thread = MakeCpuBackend(1);
  auto two_threads = MakeCpuBackend(2);
  uint32_t seed = 200;
  for (int64_t k : {7, 65, 577}) {
    for (int64_t n : {5, 130}) {
      SCOPED_TRACE(::testing::Message() << "k " << k << " n " << n);
      constexpr int64_t kM = 70;
      const std::vector<float> x = RandomValues(kM * k, ++seed);
      const std::vector<float> w = RandomValues(n * k, ++seed);
      const std::vector<float> bias = RandomValues(n, ++seed);
      absl::StatusOr<Weight> w1 = one_thread->UploadWeight(w, n, k, type);
      absl::StatusOr<Weight> w2 = two_threads->UploadWeight(w, n, k, type);
      ASSERT_TRUE(w1.ok() && w2.ok());

      std::vector<float> batched = Poisoned(kM * n);
      two_threads->Gemm(x.data(), kM, w2->view(), bias.data(), batched.data());
      std::vector<float> single_threaded = Poisoned(kM * n);
      one_thread->Gemm(x.data(), kM, w1->view(), bias.data(), single_threaded.data());
      ExpectBitwiseEqual(single_threaded.data(), batched.data(), batched.size());

      // Each row alone, and each row inside a window of 3 rows starting at it.
      for (int64_t i = 0; i < kM; ++i) {
        std::vector<float> alone = Poisoned(n);
        two_threads->Gemm(x.data() + i * k, 1, w2->view(), bias.data(), alone.data());
        ExpectBitwiseEqual(alone.data(), batched.data() + i * n, n);
        const int64_t rows = std::min<int64_t>(3, kM - i);
        std::vector<float> window = Poisoned(rows * n);
        one_thread->Gemm(x.data() + i * k, rows, w1->view(), bias.data(), window.data());
        ExpectBitwiseEqual(window.data(), batched.data() + i * n, rows * n);
      }
    }
  }
}

TEST(GemmBf16Test, EqualsF32GemmOverRoundedWeightsBitwise) {
  auto backend = MakeCpuBackend(2);
  constexpr int64_t kM = 17, kK = 577, kN = 130;
  const std::vector<float> x = RandomValues(kM * kK, 1);
  const std::vector<float> w = RandomValues(kN * kK, 2);
  absl::StatusOr<Weight> bf16 = backend->UploadWeight(w, kN, kK, DType::kBF16);
  absl::StatusOr<Weight> rounded = backend->UploadWeight(RoundToBf16(w), kN, kK, DType::kF32);
  ASSERT_TRUE(bf16.ok() && rounded.ok());
  std::vector<float> y_bf16 = Poisoned(kM * kN);
  std::vector<float> y_f32 = Poisoned(kM * kN);
  backend->Gemm(x.data(), kM, bf16->view(), nullptr, y_bf16.data());
  backend->Gemm(x.data(), kM, rounded->view(), nullptr, y_f32.data());
  ExpectBitwiseEqual(y_bf16.data(), y_f32.data(), y_f32.size());
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, GemmTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(EmbedTest, CopiesTableRows) {
  auto backend = MakeCpuBackend(2);
  constexpr int64_t kVocab = 50, kHidden = 65;
  const std::vector<float> table = RandomValues(kVocab * kHidden, 7);
  const std::vector<int32_t> tokens = {0, 49, 3, 3, 17, 0, 48};
  for (DType type : {DType::kF32, DType::kBF16}) {
    absl::StatusOr<Weight> weight = backend->UploadWeight(table, kVocab, kHidden, type);
    ASSERT_TRUE(weight.ok());
    const std::vector<float> expected_table = type == DType::kBF16 ? RoundToBf16(table) : table;
    std::vector<float> out = Poisoned(tokens.size() * kHidden);
    backend->Embed(weight->view(), 0, tokens.data(), static_cast<int64_t>(tokens.size()),
                   out.data());
    for (size_t i = 0; i < tokens.size(); ++i) {
      ExpectBitwiseEqual(out.data() + i * kHidden, expected_table.data() + tokens[i] * kHidden,
                         kHidden);
    }
  }
}

// A shard of the vocabulary (rows [17, 49) of it) writes the rows it holds and -0.0 elsewhere.
TEST(EmbedTest, AVocabularyShardWritesNegativeZerosForRowsItLacks) {
  auto backend = MakeCpuBackend(2);
  constexpr int64_t kFirst = 17, kRows = 32, kHidden = 65;
  const std::vector<float> table = RandomValues(kRows * kHidden, 8);
  const std::vector<int32_t> tokens = {0, 49, 17, 48, 16, 30};
  Weight weight = *backend->UploadWeight(table, kRows, kHidden, DType::kF32);
  std::vector<float> out = Poisoned(tokens.size() * kHidden);
  backend->Embed(weight.view(), kFirst, tokens.data(), static_cast<int64_t>(tokens.size()),
                 out.data());
  const std::vector<float> negative_zeros(kHidden, -0.0f);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool held = tokens[i] >= kFirst && tokens[i] < kFirst + kRows;
    ExpectBitwiseEqual(out.data() + i * kHidden,
                       held ? table.data() + (tokens[i] - kFirst) * kHidden : negative_zeros.data(),
                       kHidden);
  }
}

std::vector<double> RmsNormReference(const std::vector<float>& x, const std::vector<float>& weight,
                                     int64_t rows, int64_t cols, float eps) {
  std::vector<double> y(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    double sum_squares = 0;
    for (int64_t c = 0; c < cols; ++c) sum_squares += double{x[r * cols + c]} * x[r * cols + c];
    const double inv_rms = 1.0 / std::sqrt(sum_squares / cols + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = weight[c] * (x[r * cols + c] * inv_rms);
  }
  return y;
}

TEST(RmsNormTest, MatchesReference) {
  auto backend = MakeCpuBackend(2);
  constexpr float kEps = 1e-5f;
  for (int64_t rows : {1, 3, 70}) {
    for (int64_t cols : {1, 7, 64, 577}) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols);
      const std::vector<float> x = RandomValues(rows * cols, 11, -3.0f, 3.0f);
      const std::vector<float> weight = RandomValues(cols, 12, 0.5f, 1.5f);
      std::vector<float> y = Poisoned(rows * cols);
      backend->RmsNorm(x.data(), weight.data(), rows, cols, kEps, y.data());
      ExpectRelativelyClose(y, RmsNormReference(x, weight, rows, cols, kEps));
    }
  }
}

TEST(AddRmsNormTest, UpdatesResidualAndNormalizes) {
  auto backend = MakeCpuBackend(2);
  constexpr float kEps = 1e-6f;
  for (int64_t rows : {1, 17}) {
    for (int64_t cols : {7, 577}) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols);
      const std::vector<float> residual_in = RandomValues(rows * cols, 21, -2.0f, 2.0f);
      const std::vector<float> x = RandomValues(rows * cols, 22, -2.0f, 2.0f);
      const std::vector<float> weight = RandomValues(cols, 23, 0.5f, 1.5f);
      std::vector<float> sum(rows * cols);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = residual_in[i] + x[i];
      const std::vector<double> expected = RmsNormReference(sum, weight, rows, cols, kEps);

      std::vector<float> residual = residual_in;
      std::vector<float> y = Poisoned(rows * cols);
      backend->AddRmsNorm(residual.data(), x.data(), weight.data(), rows, cols, kEps, y.data());
      EXPECT_EQ(residual, sum);
      ExpectRelativelyClose(y, expected);

      // y may alias x.
      residual = residual_in;
      std::vector<float> in_place = x;
      backend->AddRmsNorm(residual.data(), in_place.data(), weight.data(), rows, cols, kEps,
                          in_place.data());
      ExpectBitwiseEqual(in_place.data(), y.data(), y.size());
    }
  }
}

TEST(RopeTest, RotatesHalvesByPositionTimesFrequency) {
  auto backend = MakeCpuBackend(2);
  constexpr int32_t kHeads = 3;
  for (int32_t head_dim : {2, 10, 64}) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim);
    constexpr int64_t kRows = 17;
    const int64_t stride = kHeads * head_dim + 5;  // rows are padded
    std::vector<float> inv_freq(head_dim / 2);
    for (int32_t i = 0; i < head_dim / 2; ++i) {
      inv_freq[i] = static_cast<float>(1.0 / std::pow(100000.0, 2.0 * i / head_dim));
    }
    std::vector<int32_t> positions(kRows);
    for (int64_t r = 0; r < kRows; ++r) positions[r] = static_cast<int32_t>(r * r * 31 % 5000);
    const std::vector<float> x = RandomValues(kRows * stride, 31);

    std::vector<double> expected(x.begin(), x.end());
    std::vector<double> scale(x.size(), 1e-30);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int32_t h = 0; h < kHeads; ++h) {
        const int64_t base = r * stride + h * head_dim;
        for (int32_t i = 0; i < head_dim / 2; ++i) {
          const double angle = double{inv_freq[i]} * positions[r];
          const double x1 = x[base + i];
          const double x2 = x[base + i + head_dim / 2];
          expected[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          expected[base + i + head_dim / 2] = x2 * std::cos(angle) + x1 * std::sin(angle);
          scale[base + i] = scale[base + i + head_dim / 2] = std::abs(x1) + std::abs(x2);
        }
      }
      for (int64_t pad = kHeads * head_dim; pad < stride; ++pad) {
        scale[r * stride + pad] = std::max(std::abs(expected[r * stride + pad]), 1e-30);
      }
    }
    std::vector<float> y = x;
    backend->Rope(y.data(), kRows, stride, kHeads, head_dim, positions.data(), inv_freq.data());
    ExpectClose(y, expected, scale);
    for (int64_t r = 0; r < kRows; ++r) {  // padding untouched
      ExpectBitwiseEqual(y.data() + r * stride + kHeads * head_dim,
                         x.data() + r * stride + kHeads * head_dim, stride - kHeads * head_dim);
    }
  }
}

TEST(SwiGluTest, MatchesReference) {
  auto backend = MakeCpuBackend(2);
  for (int64_t m : {1, 3, 70}) {
    for (int64_t inter : {1, 7, 1536}) {
      SCOPED_TRACE(::testing::Message() << "m " << m << " inter " << inter);
      const std::vector<float> gate_up = RandomValues(m * 2 * inter, 41, -8.0f, 8.0f);
      std::vector<double> expected(m * inter);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t i = 0; i < inter; ++i) {
          const double g = gate_up[r * 2 * inter + i];
          const double u = gate_up[r * 2 * inter + inter + i];
          expected[r * inter + i] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      std::vector<float> out = Poisoned(m * inter);
      backend->SwiGlu(gate_up.data(), m, inter, out.data());
      ExpectRelativelyClose(out, expected);
    }
  }
}

TEST(GatherRowsTest, CopiesSelectedRows) {
  auto backend = MakeCpuBackend(2);
  constexpr int64_t kRows = 9, kCols = 13;
  const std::vector<float> x = RandomValues(kRows * kCols, 51);
  const std::vector<int32_t> rows = {8, 0, 4, 4, 2};
  std::vector<float> out = Poisoned(rows.size() * kCols);
  backend->GatherRows(x.data(), kCols, rows.data(), static_cast<int64_t>(rows.size()), out.data());
  for (size_t i = 0; i < rows.size(); ++i) {
    ExpectBitwiseEqual(out.data() + i * kCols, x.data() + rows[i] * kCols, kCols);
  }
}

}  // namespace
}  // namespace pulse
