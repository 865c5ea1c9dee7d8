#include "core/format/config.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/format/test_configs.h"

namespace pulse {
namespace {

using ::pulse::testing::SmolLm2Config;
using ::pulse::testing::TinyConfig;
using ::testing::HasSubstr;

TEST(ModelConfigTest, RealConfigsAreValid) {
  EXPECT_TRUE(SmolLm2Config().Validate().ok()) << SmolLm2Config().Validate();
  EXPECT_TRUE(TinyConfig().Validate().ok()) << TinyConfig().Validate();
}

TEST(ModelConfigTest, ValidateNamesTheBadField) {
  const auto error = [](auto mutate) {
    ModelConfig config = SmolLm2Config();
    mutate(config);
    return std::string(config.Validate().message());
  };
  EXPECT_THAT(error([](ModelConfig& c) { c.hidden_size = 0; }), HasSubstr("hidden_size = 0"));
  EXPECT_THAT(error([](ModelConfig& c) { c.hidden_size = 1 << 20; }),
              HasSubstr("hidden_size = 1048576 is outside"));
  EXPECT_THAT(error([](ModelConfig& c) { c.num_layers = -1; }), HasSubstr("num_layers"));
  EXPECT_THAT(error([](ModelConfig& c) { c.num_kv_heads = 4; }), HasSubstr("not a multiple"));
  EXPECT_THAT(error([](ModelConfig& c) { c.num_kv_heads = 18; }), HasSubstr("num_kv_heads"));
  EXPECT_THAT(error([](ModelConfig& c) { c.head_dim = 63; }), HasSubstr("must be even"));
  EXPECT_THAT(error([](ModelConfig& c) { c.vocab_size = 1 << 30; }), HasSubstr("vocab_size"));
  EXPECT_THAT(error([](ModelConfig& c) { c.max_position = 0; }), HasSubstr("max_position"));
  EXPECT_THAT(error([](ModelConfig& c) { c.rms_norm_eps = 0; }), HasSubstr("rms_norm_eps"));
  EXPECT_THAT(error([](ModelConfig& c) { c.rope_theta = NAN; }), HasSubstr("rope_theta"));
  EXPECT_THAT(error([](ModelConfig& c) { c.eos_token_ids = {49152}; }),
              HasSubstr("eos_token_id = 49152 is outside the vocabulary"));
  EXPECT_THAT(error([](ModelConfig& c) { c.bos_token_id = -2; }), HasSubstr("bos_token_id"));
  EXPECT_THAT(error([](ModelConfig& c) { c.rope_freq_factors = {1.0f}; }),
              HasSubstr("rope_freq_factors has 1 values"));
  EXPECT_THAT(error([](ModelConfig& c) {
                c.rope_scaling.type = RopeScaling::Type::kLlama3;
                c.rope_scaling.factor = 8;
                c.rope_scaling.high_freq_factor = 0.5f;
              }),
              HasSubstr("high_freq_factor"));
}

TEST(ModelConfigTest, ArchitectureNames) {
  EXPECT_EQ(ArchitectureName(Architecture::kLlama), "llama");
  EXPECT_EQ(ArchitectureName(Architecture::kMistral), "mistral");
  EXPECT_EQ(ArchitectureName(Architecture::kQwen2), "qwen2");
}

TEST(ModelConfigTest, RopeFrequenciesWithoutAndWithLinearScaling) {
  ModelConfig config = SmolLm2Config();
  std::vector<float> plain = config.RopeInverseFrequencies();
  ASSERT_EQ(plain.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_FLOAT_EQ(plain[i], static_cast<float>(std::pow(100000.0L, -2.0L * i / 64))) << i;
  }
  config.rope_scaling.type = RopeScaling::Type::kLinear;
  config.rope_scaling.factor = 4.0f;
  std::vector<float> linear = config.RopeInverseFrequencies();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(linear[i], plain[i] / 4.0f) << i;

  config.rope_scaling.type = RopeScaling::Type::kNone;
  config.rope_freq_factors.assign(32, 1.0f);
  config.rope_freq_factors[31] = 8.0f;
  std::vector<float> factored = config.RopeInverseFrequencies();
  EXPECT_EQ(factored[0], plain[0]);
  EXPECT_FLOAT_EQ(factored[31], static_cast<float>(std::pow(100000.0L, -62.0L / 64) / 8));
}

}  // namespace
}  // namespace pulse
