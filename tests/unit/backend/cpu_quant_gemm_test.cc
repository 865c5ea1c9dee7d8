// The CPU backend's GEMM over weights kept in ggml's blocks (Q8_0, Q4_0, Q4_1, and the K-quants
// Q4_K and Q6_K, whose rows are whole 256-value super-blocks: the shapes widen to fit). The
// 32-value types' contract (block_lanes.h): the weights decode as the GGUF reader decodes them, so
// the result is the fp32 GEMM's over the reader's values, bit for bit, at every kernel level this
// CPU runs. The K-quants' (kquant_gemm.h), against the reader's ggml-exact dequantization: with
// the activations quantized as the kernel's contract says (8-bit blocks of 32, d = max|x| / 127),
// the result is the fp64 dot product within float accumulation; against the unquantized
// activations, within the bound that quantization error allows; every kernel level this CPU runs
// gives the generic (scalar) one's bits. Rows do not depend on the batch or the threads, and
// embedding rows decode as the reader decodes them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/cpu_level.h"
#include "core/backend/cpu/kquant_gemm.h"
#include "core/base/ggml_blocks.h"
#include "core/format/dequant.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"
#include "tests/unit/backend/random_blocks.h"

namespace pulse {
namespace {

using ::pulse::testing::MakeCpuBackend;
using ::pulse::testing::RandomBlocks;
using ::pulse::testing::RandomValues;

GgmlType GgmlOf(DType type) {
  switch (type) {
    case DType::kQ8_0:
      return GgmlType::kQ8_0;
    case DType::kQ4_0:
      return GgmlType::kQ4_0;
    case DType::kQ4_K:
      return GgmlType::kQ4_K;
    case DType::kQ6_K:
      return GgmlType::kQ6_K;
    default:
      return GgmlType::kQ4_1;
  }
}

// `cols` rounded up to whole blocks of `type`.
int64_t WholeBlocks(DType type, int64_t cols) {
  const int64_t block = BlockTypeValues(type);
  return (cols + block - 1) / block * block;
}

struct Shape {
  int64_t m;
  int64_t n;
  int64_t k;
};

// `shape` with k rounded up to whole blocks of `type`.
Shape Fit(DType type, Shape shape) { return {shape.m, shape.n, WholeBlocks(type, shape.k)}; }

// The activations as the K-quant kernels' contract quantizes them.
std::vector<double> QuantizedActivations(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += kGgmlBlockValues) {
    float amax = 0.0f;
    for (int j = 0; j < kGgmlBlockValues; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f;
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kGgmlBlockValues; ++j) {
      out[b + j] = static_cast<double>(std::nearbyint(x[b + j] * inverse)) * d;
    }
  }
  return out;
}

class QuantGemmTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantGemmTest, EqualsTheF32GemmOverTheReadersValuesAtEveryLevel) {
  const DType type = GetParam();
  if (BlockTypeValues(type) != kGgmlBlockValues) {
    GTEST_SKIP() << "the K-quants multiply q8 activations (KQuantGemmTest)";
  }
  int levels = 0;
  for (const cpu::CpuLevel level :
       {cpu::CpuLevel::kGeneric, cpu::CpuLevel::kAvx2, cpu::CpuLevel::kAvx512}) {
    if (!cpu::CpuLevelSupported(level)) continue;
    ++levels;
    absl::StatusOr<std::shared_ptr<Backend>> backend =
        CreateCpuBackend({.threads = 2, .kernel_level = level});
    ASSERT_TRUE(backend.ok()) << backend.status();
    for (const Shape& shape : {Shape{1, 37, 32}, Shape{3, 64, 96}, Shape{4, 19, 576},
                               Shape{5, 130, 1536}, Shape{17, 33, 352}}) {
      const Shape s = Fit(type, shape);
      SCOPED_TRACE(::testing::Message()
                   << cpu::CpuLevelName(level) << " " << s.m << "x" << s.n << "x" << s.k);
      const std::vector<std::byte> blocks =
          RandomBlocks(type, s.n, s.k, static_cast<uint32_t>(s.n), true);
      std::vector<float> values(static_cast<size_t>(s.n * s.k));
      ASSERT_TRUE(Dequantize(GgmlOf(type), blocks, values).ok());
      absl::StatusOr<Weight> kept = (*backend)->UploadBlocks(blocks, s.n, s.k, type);
      ASSERT_TRUE(kept.ok()) << kept.status();
      absl::StatusOr<Weight> f32 = (*backend)->UploadWeight(values, s.n, s.k, DType::kF32);
      ASSERT_TRUE(f32.ok()) << f32.status();
      const std::vector<float> x = RandomValues(static_cast<size_t>(s.m * s.k), 5, -2.0f, 2.0f);
      const std::vector<float> bias = RandomValues(static_cast<size_t>(s.n), 6, -1.0f, 1.0f);
      std::vector<float> want(static_cast<size_t>(s.m * s.n));
      std::vector<float> got(want.size());
      (*backend)->Gemm(x.data(), s.m, f32->view(), bias.data(), want.data());
      (*backend)->Gemm(x.data(), s.m, kept->view(), bias.data(), got.data());
      ASSERT_TRUE((*backend)->Synchronize().ok());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    }
  }
  RecordProperty("levels", levels);
}

TEST_P(QuantGemmTest, RowsDoNotDependOnTheBatchOrThreads) {
  const DType type = GetParam();
  constexpr int64_t kM = 7;
  constexpr int64_t kN = 70;
  const int64_t cols = WholeBlocks(type, 192);
  const std::vector<std::byte> blocks = RandomBlocks(type, kN, cols, 21, true);
  const std::vector<float> x = RandomValues(kM * cols, 22, -1.0f, 1.0f);
  const auto two = MakeCpuBackend(2);
  const auto one = MakeCpuBackend(1);
  const Weight w2 = *two->UploadBlocks(blocks, kN, cols, type);
  const Weight w1 = *one->UploadBlocks(blocks, kN, cols, type);
  std::vector<float> batched(kM * kN);
  std::vector<float> single(kM * kN);
  two->Gemm(x.data(), kM, w2.view(), nullptr, batched.data());
  one->Gemm(x.data(), kM, w1.view(), nullptr, single.data());
  EXPECT_EQ(std::memcmp(batched.data(), single.data(), batched.size() * sizeof(float)), 0);
  for (int64_t r = 0; r < kM; ++r) {
    std::vector<float> alone(kN);
    two->Gemm(x.data() + r * cols, 1, w2.view(), nullptr, alone.data());
    EXPECT_EQ(std::memcmp(alone.data(), batched.data() + r * kN, kN * sizeof(float)), 0) << r;
  }
}

TEST_P(QuantGemmTest, EmbedDecodesRowsAsTheReaderDoes) {
  const DType type = GetParam();
  const auto backend = MakeCpuBackend(2);
  constexpr int64_t kRows = 9;
  const int64_t cols = WholeBlocks(type, 96);
  const std::vector<std::byte> blocks = RandomBlocks(type, kRows, cols, 31, true);
  std::vector<float> expected(kRows * cols);
  ASSERT_TRUE(Dequantize(GgmlOf(type), blocks, expected).ok());
  const Weight table = *backend->UploadBlocks(blocks, kRows, cols, type);
  const std::vector<int32_t> tokens = {4, 0, 8, 4};
  std::vector<float> out(tokens.size() * cols);
  backend->Embed(table.view(), 0, tokens.data(), static_cast<int64_t>(tokens.size()), out.data());
  ASSERT_TRUE(backend->Synchronize().ok());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(std::memcmp(out.data() + i * cols, expected.data() + tokens[i] * cols,
                          cols * sizeof(float)),
              0)
        << i;
  }
}

TEST_P(QuantGemmTest, UploadBlocksRefusesAShapeTheBytesDoNotFit) {
  const DType type = GetParam();
  const auto backend = MakeCpuBackend(1);
  const int64_t block = BlockTypeValues(type);
  const std::vector<std::byte> blocks = RandomBlocks(type, 4, 2 * block, 41, true);
  // Not whole blocks (for a K-quant, whole 32-value blocks but not whole super-blocks).
  EXPECT_EQ(backend->UploadBlocks(blocks, 4, block + block / 2, type).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->UploadBlocks(blocks, 5, 2 * block, type).status().code(),
            absl::StatusCode::kInvalidArgument);  // too few bytes
  EXPECT_EQ(backend->UploadBlocks(blocks, 4, 2 * block, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);  // not a block type
  EXPECT_TRUE(backend->UploadBlocks(blocks, 4, 2 * block, type).ok());
}

class KQuantGemmTest : public ::testing::TestWithParam<DType> {};

TEST_P(KQuantGemmTest, MatchesTheDequantizedWeights) {
  const DType type = GetParam();
  const auto backend = MakeCpuBackend(2);
  for (const Shape& shape : {Shape{1, 37, 256}, Shape{3, 64, 256}, Shape{4, 21, 512},
                             Shape{8, 19, 768}, Shape{17, 9, 256}, Shape{5, 130, 1536}}) {
    SCOPED_TRACE(::testing::Message() << shape.m << "x" << shape.n << "x" << shape.k);
    const auto [m, n, k] = shape;
    const std::vector<std::byte> blocks = RandomBlocks(type, n, k, static_cast<uint32_t>(n), true);
    std::vector<float> values(static_cast<size_t>(n * k));
    ASSERT_TRUE(Dequantize(GgmlOf(type), blocks, values).ok());
    const std::vector<double> w(values.begin(), values.end());
    absl::StatusOr<Weight> weight = backend->UploadBlocks(blocks, n, k, type);
    ASSERT_TRUE(weight.ok()) << weight.status();
    std::vector<float> x = RandomValues(static_cast<size_t>(m * k), 5, -2.0f, 2.0f);
    for (int64_t i = 0; i < m * k; i += 64) x[static_cast<size_t>(i)] = 0.0f;
    std::fill(x.begin(), x.begin() + kGgmlBlockValues, 0.0f);  // an all-zero block
    const std::vector<double> xq = QuantizedActivations(x);
    const std::vector<float> bias = RandomValues(static_cast<size_t>(n), 6, -1.0f, 1.0f);
    std::vector<float> y(static_cast<size_t>(m * n));
    backend->Gemm(x.data(), m, weight->view(), bias.data(), y.data());
    ASSERT_TRUE(backend->Synchronize().ok());
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = bias[static_cast<size_t>(j)];
        double magnitude = std::abs(exact);
        double unquantized = exact;
        double quantization_bound = 0.0;
        for (int64_t b = 0; b < k; b += kGgmlBlockValues) {
          double amax = 0.0;
          double w_sum = 0.0;
          for (int64_t c = b; c < b + kGgmlBlockValues; ++c) {
            const double wv = w[static_cast<size_t>(j * k + c)];
            const auto xi = static_cast<size_t>(r * k + c);
            exact += wv * xq[xi];
            magnitude += std::abs(wv * xq[xi]);
            unquantized += wv * x[xi];
            amax = std::max(amax, std::abs(static_cast<double>(x[xi])));
            w_sum += std::abs(wv);
          }
          // |x - xq| <= d / 2 = amax / 254 per value.
          quantization_bound += w_sum * amax / 254.0 * (1 + 1e-6);
        }
        const double actual = y[static_cast<size_t>(r * n + j)];
        ASSERT_NEAR(actual, exact, 1e-5 * magnitude + 1e-30) << "row " << r << " column " << j;
        ASSERT_NEAR(actual, unquantized, quantization_bound + 1e-5 * magnitude + 1e-30)
            << "row " << r << " column " << j;
      }
    }
  }
}

TEST_P(KQuantGemmTest, EveryCpuLevelGivesTheGenericBits) {
  const DType type = GetParam();
  std::vector<cpu::CpuLevel> levels;  // those this CPU runs besides the generic one
  for (const cpu::CpuLevel level : {cpu::CpuLevel::kAvx2, cpu::CpuLevel::kAvx512}) {
    if (cpu::CpuLevelSupported(level)) levels.push_back(level);
  }
  RecordProperty("vector_levels_compared", static_cast<int>(levels.size()));
  ThreadPool pool(2);
  for (const auto [m, n, k] : {Shape{6, 45, 512}, Shape{5, 33, 512}, Shape{1, 17, 256},
                               Shape{3, 7, 512}, Shape{4, 11, 768}, Shape{17, 5, 256}}) {
    SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k);
    const std::vector<std::byte> blocks = RandomBlocks(type, n, k, 11, true);
    const MatrixView w{blocks.data(), type, n, k};
    const std::vector<float> x = RandomValues(static_cast<size_t>(m * k), 12, -3.0f, 3.0f);
    const std::vector<float> bias = RandomValues(static_cast<size_t>(n), 13, -1.0f, 1.0f);
    std::vector<float> generic(static_cast<size_t>(m * n));
    cpu::KQuantGemm(pool, x.data(), m, w, bias.data(), generic.data(), cpu::CpuLevel::kGeneric);
    for (const cpu::CpuLevel level : levels) {
      std::vector<float> got(generic.size());
      cpu::KQuantGemm(pool, x.data(), m, w, bias.data(), got.data(), level);
      EXPECT_EQ(std::memcmp(got.data(), generic.data(), got.size() * sizeof(float)), 0)
          << cpu::CpuLevelName(level);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KQuants, KQuantGemmTest, ::testing::Values(DType::kQ4_K, DType::kQ6_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(BlockTypes, QuantGemmTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K,
                                           DType::kQ6_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace pulse
