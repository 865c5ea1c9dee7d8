// The CPU backend's GEMM over weights kept in ggml's blocks (Q8_0, Q4_0, Q4_1, and the K-quants
// Q4_K and Q6_K, whose rows are whole 256-value super-blocks: the shapes widen to fit). The
// 32-value types' contract (block_lanes.h): the weights decode as the GGUF reader decodes them, so
// the result is the fp32 GEMM's over the reader's values, bit for bit, at every kernel level this
// CPU runs. Rows do not depend on the batch or the threads, and embedding rows decode as the
// reader decodes them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/cpu_level.h"
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

class QuantGemmTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantGemmTest, EqualsTheF32GemmOverTheReadersValuesAtEveryLevel) {
  const DType type = GetParam();
  if (BlockTypeValues(type) != kGgmlBlockValues) {
    GTEST_SKIP() << "the K-quants multiply q8 activations (quant_gemm.h)";
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
