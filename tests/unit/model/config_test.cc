#include "core/model/config.h"

#include <cmath>

#include "core/model/expected_tensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/model/test_configs.h"

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

TEST(ModelConfigTest, ParameterCountOfSmolLm2) {
  EXPECT_EQ(SmolLm2Config().ParameterCount(), 134'515'008);
  ModelConfig untied = SmolLm2Config();
  untied.tie_word_embeddings = false;
  EXPECT_EQ(untied.ParameterCount(), 134'515'008 + 49152 * 576);
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

TEST(ExpectedTensorsTest, NamesAndShapes) {
  ModelConfig config = TinyConfig();
  config.attention_bias = true;
  const std::vector<TensorInfo> tensors = ExpectedTensors(config);
  ASSERT_EQ(tensors.size(), 1 + 2 * 12 + 2u);
  EXPECT_EQ(tensors[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(tensors[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(tensors[2].shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(tensors[3].shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(tensors[6].name, "model.layers.0.self_attn.k_proj.bias");
  EXPECT_EQ(tensors[6].shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(tensors[12].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(tensors[12].shape, (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(tensors.back().name, "lm_head.weight");
  config.tie_word_embeddings = true;
  config.attention_bias = false;
  EXPECT_EQ(ExpectedTensors(config).back().name, "model.norm.weight");
  EXPECT_EQ(ExpectedTensors(config).size(), 1 + 2 * 9 + 1u);
}

// A source that lists the given tensors and cannot read them.
class ListedSource final : public TensorSource {
 public:
  ListedSource(ModelConfig config, std::vector<TensorInfo> tensors)
      : config_(std::move(config)), tensors_(std::move(tensors)) {}
  std::string_view format() const override { return "listed"; }
  const ModelConfig& config() const override { return config_; }
  std::span<const TensorInfo> tensors() const override { return tensors_; }
  absl::Status Read(std::string_view, std::span<float>) const override {
    return absl::UnimplementedError("listed");
  }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }

 private:
  ModelConfig config_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

TEST(CheckTensorsTest, ReportsEveryMissingTensorAndShapeMismatch) {
  const ModelConfig config = TinyConfig();
  std::vector<TensorInfo> tensors = ExpectedTensors(config);
  tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {2}, "f32"});  // extra: ok
  EXPECT_TRUE(CheckTensors(ListedSource(config, tensors)).ok());

  tensors.erase(tensors.begin() + 1);  // model.layers.0.input_layernorm.weight
  tensors.erase(tensors.end() - 2);    // lm_head.weight (the extra one is last)
  tensors[1].shape = {16, 15};         // q_proj of layer 0
  const absl::Status status = CheckTensors(ListedSource(config, tensors));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.layers.0.input_layernorm.weight is missing"));
  EXPECT_THAT(status.message(), HasSubstr("lm_head.weight is missing"));
  EXPECT_THAT(status.message(), HasSubstr("model.layers.0.self_attn.q_proj.weight has shape "
                                          "[16, 15], expected [16, 16]"));
}

}  // namespace
}  // namespace pulse
