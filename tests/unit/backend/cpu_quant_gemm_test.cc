// The CPU backend's GEMM over weights kept in ggml's blocks (Q8_0, Q4_0, Q4_1, and the K-quants
// Q4_K and Q6_K, whose rows are whole 256-value super-blocks: the shapes widen to fit) against
// references built from the GGUF reader's ggml-exact dequantization: with the activations quantized
// as the kernel's contract says (8-bit blocks, d = max|x| / 127), the result is the fp64 dot
// product within float accumulation; against the unquantized activations, within the bound that
// quantization error allows. Every kernel level this CPU runs gives the same bits, rows do not
// depend on the batch or the threads, and embedding rows decode as the reader decodes them.
// (Kernel levels this CPU lacks are not run: the scalar one always is.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/quant_gemm.h"
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

std::vector<double> Dequantized(DType type, std::span<const std::byte> blocks, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  EXPECT_TRUE(Dequantize(GgmlOf(type), blocks, values).ok());
  return {values.begin(), values.end()};
}

// The activations as the kernel's contract quantizes them.
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

struct Shape {
  int64_t m;
  int64_t n;
  int64_t k;
};

// `shape` with k rounded up to whole blocks of `type`.
Shape Fit(DType type, Shape shape) { return {shape.m, shape.n, WholeBlocks(type, shape.k)}; }

class QuantGemmTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantGemmTest, MatchesTheDequantizedWeights) {
  const DType type = GetParam();
  const auto backend = MakeCpuBackend(2);
  for (const Shape& shape : {Shape{1, 37, 32}, Shape{3, 64, 96}, Shape{4, 21, 320},
                             Shape{8, 19, 576}, Shape{17, 9, 256}, Shape{5, 130, 1536}}) {
    const Shape s = Fit(type, shape);
    SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k);
    const std::vector<std::byte> blocks =
        RandomBlocks(type, s.n, s.k, static_cast<uint32_t>(s.n), true);
    const std::vector<double> w = Dequantized(type, blocks, s.n * s.k);
    absl::StatusOr<Weight> weight = backend->UploadBlocks(blocks, s.n, s.k, type);
    ASSERT_TRUE(weight.ok()) << weight.status();
    std::vector<float> x = RandomValues(static_cast<size_t>(s.m * s.k), 5, -2.0f, 2.0f);
    for (int64_t i = 0; i < s.k; i += 64) x[static_cast<size_t>(i)] = 0.0f;
    std::fill(x.begin(), x.begin() + std::min<int64_t>(s.k, 32), 0.0f);  // an all-zero block
    const std::vector<double> xq = QuantizedActivations(x);
    const std::vector<float> bias = RandomValues(static_cast<size_t>(s.n), 6, -1.0f, 1.0f);
    std::vector<float> y(static_cast<size_t>(s.m * s.n));
    backend->Gemm(x.data(), s.m, weight->view(), bias.data(), y.data());
    ASSERT_TRUE(backend->Synchronize().ok());
    for (int64_t r = 0; r < s.m; ++r) {
      for (int64_t j = 0; j < s.n; ++j) {
        double exact = bias[static_cast<size_t>(j)];
        double magnitude = std::abs(exact);
        double unquantized = exact;
        double quantization_bound = 0.0;
        for (int64_t b = 0; b < s.k; b += kGgmlBlockValues) {
          double amax = 0.0;
          double w_sum = 0.0;
          for (int64_t c = b; c < b + kGgmlBlockValues; ++c) {
            const double wv = w[static_cast<size_t>(j * s.k + c)];
            const size_t xi = static_cast<size_t>(r * s.k + c);
            exact += wv * xq[xi];
            magnitude += std::abs(wv * xq[xi]);
            unquantized += wv * x[xi];
            amax = std::max(amax, std::abs(static_cast<double>(x[xi])));
            w_sum += std::abs(wv);
          }
          quantization_bound += w_sum * amax / 254.0 * (1 + 1e-6);
        }
        const double actual = y[static_cast<size_t>(r * s.n + j)];
        ASSERT_NEAR(actual, exact, 1e-5 * magnitude + 1e-30) << "row " << r << " column " << j;
        ASSERT_NEAR(actual, unquantized, quantization_bound + 1e-5 * magnitude + 1e-30)
            << "row " << r << " column " << j;
      }
    }
  }
}

TEST_P(QuantGemmTest, EveryKernelLevelGivesTheSameBits) {
  const DType type = GetParam();
  ThreadPool pool(2);
  for (const Shape& fitted : {Shape{6, 45, 320}, Shape{5, 33, 352}, Shape{1, 17, 32},
                              Shape{3, 7, 512}, Shape{4, 11, 768}, Shape{17, 5, 256}}) {
    const Shape shape = Fit(type, fitted);
    SCOPED_TRACE(::testing::Message() << shape.m << "x" << shape.n << "x" << shape.k);
    const std::vector<std::byte> blocks = RandomBlocks(type, shape.n, shape.k, 11, true);
    const MatrixView w{blocks.data(), type, shape.n, shape.k};
    const std::vector<float> x = RandomValues(shape.m * shape.k, 12, -3.0f, 3.0f);
    std::vector<float> scalar(shape.m * shape.n);
    cpu::QuantizedGemm(pool, x.data(), shape.m, w, nullptr, scalar.data(),
                       cpu::QuantKernelLevel::kScalar);
    int levels = 0;
    for (const cpu::QuantKernelLevel level :
         {cpu::QuantKernelLevel::kAvx2, cpu::QuantKernelLevel::kAvx512Vnni}) {
      if (!cpu::QuantKernelLevelSupported(level)) continue;
      ++levels;
      std::vector<float> vector(shape.m * shape.n);
      cpu::QuantizedGemm(pool, x.data(), shape.m, w, nullptr, vector.data(), level);
      EXPECT_EQ(std::memcmp(scalar.data(), vector.data(), scalar.size() * sizeof(float)), 0)
          << "level " << static_cast<int>(level);
    }
    RecordProperty("vector_levels_compared", levels);
  }
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
  backend->Embed(table.view(), tokens.data(), static_cast<int64_t>(tokens.size()), out.data());
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

INSTANTIATE_TEST_SUITE_P(BlockTypes, QuantGemmTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K,
                                           DType::kQ6_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace pulse
