// The CPU kernels of every instruction-set level this CPU runs (cpu_level.h) against those of the
// best one, op by op on random inputs: the levels with fused multiply-add give the same bits (one
// summation order, the same roundings); the generic level rounds each multiply-add twice and stays
// within that rounding of them.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/cpu_level.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"
#include "tests/unit/backend/random_blocks.h"

namespace pulse {
namespace {

using cpu::CpuLevel;
using ::pulse::testing::RandomBlocks;
using ::pulse::testing::RandomValues;

std::shared_ptr<Backend> BackendAt(CpuLevel level) {
  absl::StatusOr<std::shared_ptr<Backend>> backend =
      CreateCpuBackend({.threads = 2, .kernel_level = level});
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *backend;
}

// Each op's outputs on fixed random inputs, by name.
struct OpOutput {
  std::string op;
  std::vector<float> values;
  bool fuses_everywhere;  // computed alike at every level (no Vec multiply-add of the generic one)
};

std::vector<OpOutput> RunOps(Backend& backend) {
  std::vector<OpOutput> outputs;
  constexpr int64_t kM = 5, kK = 577, kN = 37;
  const std::vector<float> x = RandomValues(kM * kK, 1);
  for (const DType type : {DType::kF32, DType::kBF16}) {
    const std::vector<float> w = RandomValues(kN * kK, 2);
    const std::vector<float> bias = RandomValues(kN, 3);
    absl::StatusOr<Weight> weight = backend.UploadWeight(w, kN, kK, type);
    EXPECT_TRUE(weight.ok()) << weight.status();
    for (const int64_t m : {int64_t{1}, kM}) {
      std::vector<float> y(m * kN);
      backend.Gemm(x.data(), m, weight->view(), bias.data(), y.data());
      outputs.push_back(
          {std::string("gemm ") + std::string(DTypeName(type)) + " m " + std::to_string(m), y,
           false});
    }
    std::vector<float> embedded(3 * kK);
    const std::vector<int32_t> tokens = {4, 0, 36};
    backend.Embed(weight->view(), 0, tokens.data(), 3, embedded.data());
    outputs.push_back({std::string("embed ") + std::string(DTypeName(type)), embedded, true});
  }
  for (const DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K}) {
    constexpr int64_t kBlockK = 512;
    const std::vector<std::byte> blocks = RandomBlocks(type, kN, kBlockK, 4, false);
    absl::StatusOr<Weight> weight = backend.UploadBlocks(blocks, kN, kBlockK, type);
    EXPECT_TRUE(weight.ok()) << weight.status();
    for (const int64_t m : {int64_t{1}, kM}) {  // rows decoded a vector at a time, and a tile
      std::vector<float> y(m * kN);
      backend.Gemm(x.data(), m, weight->view(), nullptr, y.data());
      // The K-quants multiply q8 activations with fused integer kernels at every level.
      outputs.push_back(
          {std::string("gemm ") + std::string(DTypeName(type)) + " m " + std::to_string(m), y,
           BlockTypeValues(type) != kGgmlBlockValues});
    }
  }
  constexpr float kEps = 1e-5f;
  const std::vector<float> norm_weight = RandomValues(kK, 5);
  std::vector<float> normed(kM * kK);
  backend.RmsNorm(x.data(), norm_weight.data(), kM, kK, kEps, normed.data());
  outputs.push_back({"rms_norm", normed, false});
  std::vector<float> residual = RandomValues(kM * kK, 6);
  backend.AddRmsNorm(residual.data(), x.data(), norm_weight.data(), kM, kK, kEps, normed.data());
  outputs.push_back({"add_rms_norm residual", residual, true});
  outputs.push_back({"add_rms_norm", normed, false});
  constexpr int32_t kHeads = 3, kHeadDim = 64;
  std::vector<float> rotated = RandomValues(kM * kHeads * kHeadDim, 7);
  const std::vector<int32_t> positions = {0, 1, 17, 300, 4095};
  std::vector<float> inv_freq(kHeadDim / 2);
  for (int32_t i = 0; i < kHeadDim / 2; ++i) {
    inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / kHeadDim);
  }
  backend.Rope(rotated.data(), kM, kHeads * kHeadDim, kHeads, kHeadDim, positions.data(),
               inv_freq.data());
  outputs.push_back({"rope", rotated, true});
  const std::vector<float> gate_up = RandomValues(kM * 2 * kK, 8, -6.0f, 6.0f);
  std::vector<float> activated(kM * kK);
  backend.SwiGlu(gate_up.data(), kM, kK, activated.data());
  outputs.push_back({"swiglu", activated, false});
  EXPECT_TRUE(backend.Synchronize().ok());
  return outputs;
}

TEST(CpuLevelsTest, EveryLevelMatchesTheBest) {
  const CpuLevel best = cpu::ResolveCpuLevel(CpuLevel::kBest);
  const std::vector<OpOutput> reference = RunOps(*BackendAt(best));
  int compared = 0;
  for (const CpuLevel level : {CpuLevel::kGeneric, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (level == best || !cpu::CpuLevelSupported(level)) continue;
    ++compared;
    const std::vector<OpOutput> outputs = RunOps(*BackendAt(level));
    ASSERT_EQ(outputs.size(), reference.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << cpu::CpuLevelName(level) << ": " << outputs[i].op);
      const std::vector<float>& got = outputs[i].values;
      const std::vector<float>& want = reference[i].values;
      ASSERT_EQ(got.size(), want.size());
      if (level != CpuLevel::kGeneric || outputs[i].fuses_everywhere) {
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
        continue;
      }
      // Two roundings instead of one per multiply-add of a sum of up to 577 terms of magnitude
      // at most 1 (36 for SwiGlu): well within 1e-5 of the output's largest magnitude.
      double largest = 0;
      for (const float v : want) largest = std::max(largest, std::abs(double{v}));
      for (size_t j = 0; j < got.size(); ++j) {
        ASSERT_NEAR(got[j], want[j], 1e-5 * largest) << "element " << j;
      }
    }
  }
  RecordProperty("levels_compared", compared);
  if (compared == 0) GTEST_SKIP() << "this CPU runs only the generic level";
}

TEST(CpuLevelsTest, ALevelTheCpuLacksIsAnError) {
  for (const CpuLevel level : {CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (cpu::CpuLevelSupported(level)) continue;
    const absl::StatusOr<std::shared_ptr<Backend>> backend =
        CreateCpuBackend({.kernel_level = level});
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(CreateCpuBackend({.kernel_level = CpuLevel::kGeneric}).ok());
}

TEST(CpuLevelsTest, NamesParse) {
  for (const CpuLevel level :
       {CpuLevel::kBest, CpuLevel::kGeneric, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    EXPECT_EQ(cpu::ParseCpuLevel(cpu::CpuLevelName(level)).value(), level);
  }
  EXPECT_EQ(cpu::ParseCpuLevel("sse4").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pulse
