#include <cmath>

#include "core/model/expected_tensors.h"
#include "core/model/tensor_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/format/test_configs.h"

namespace pulse {
namespace {

using ::pulse::testing::TinyConfig;
using ::testing::HasSubstr;

std::vector<float> ReadAll(const TensorSource& source, std::string_view name) {
  for (const TensorInfo& tensor : source.tensors()) {
    if (tensor.name != name) continue;
    std::vector<float> values(tensor.elements());
    EXPECT_TRUE(source.Read(name, values).ok());
    return values;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

TEST(RandomSourceTest, HasTheExpectedTensors) {
  ModelConfig config = TinyConfig();
  config.attention_bias = true;
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenRandomSource(config, 7);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->format(), "random");
  EXPECT_TRUE(CheckTensors(**source).ok()) << CheckTensors(**source);
  ASSERT_EQ((*source)->tensors().size(), ExpectedTensors(config).size());
  EXPECT_EQ((*source)->tensors()[0].stored_type, "random");
  EXPECT_EQ((*source)->metadata().at("random.seed"), "7");
}

TEST(RandomSourceTest, DeterministicPerSeedAndName) {
  const ModelConfig config = TinyConfig();
  auto a = *OpenRandomSource(config, 1);
  auto b = *OpenRandomSource(config, 1);
  auto c = *OpenRandomSource(config, 2);
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  const std::string k = "model.layers.1.self_attn.k_proj.weight";
  // Reading in a different order gives the same values.
  const std::vector<float> b_k = ReadAll(*b, k);
  const std::vector<float> a_q = ReadAll(*a, q);
  EXPECT_EQ(a_q, ReadAll(*b, q));
  EXPECT_EQ(ReadAll(*a, k), b_k);
  EXPECT_NE(a_q, ReadAll(*c, q));
  EXPECT_NE(ReadAll(*a, "model.layers.0.self_attn.q_proj.weight"), a_q);
}

TEST(RandomSourceTest, ValuesHaveTheIntendedScale) {
  ModelConfig config = TinyConfig();
  config.hidden_size = 256;
  config.num_heads = 8;
  config.num_kv_heads = 4;
  config.head_dim = 32;
  config.intermediate_size = 512;
  auto source = *OpenRandomSource(config, 3);
  const auto moments = [](const std::vector<float>& v) {
    double sum = 0, sq = 0;
    for (const float x : v) sum += x;
    const double mean = sum / v.size();
    for (const float x : v) sq += (x - mean) * (x - mean);
    return std::make_pair(mean, std::sqrt(sq / v.size()));
  };
  const auto [down_mean, down_std] =
      moments(ReadAll(*source, "model.layers.0.mlp.down_proj.weight"));
  EXPECT_NEAR(down_mean, 0.0, 0.002);
  EXPECT_NEAR(down_std, 1.0 / std::sqrt(512.0), 0.02 / std::sqrt(512.0));
  const auto [norm_mean, norm_std] = moments(ReadAll(*source, "model.norm.weight"));
  EXPECT_NEAR(norm_mean, 1.0, 0.02);
  EXPECT_LT(norm_std, 0.1);
  for (const float x : ReadAll(*source, "model.norm.weight")) EXPECT_GT(x, 0.8f);
}

TEST(RandomSourceTest, ErrorsForUnknownNamesSizesAndConfigs) {
  auto source = *OpenRandomSource(TinyConfig(), 1);
  std::vector<float> out(16);
  EXPECT_EQ(source->Read("nope", out).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(source->Read("model.norm.weight", std::span(out).first(15)).message(),
              HasSubstr("output holds 15 values, the tensor has 16"));
  ModelConfig bad = TinyConfig();
  bad.num_kv_heads = 3;
  EXPECT_FALSE(OpenRandomSource(bad, 1).ok());
}

}  // namespace
}  // namespace pulse
