#include "core/model/expected_tensors.h"

#include <map>
#include <span>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/format/test_configs.h"

namespace pulse {
namespace {

using ::pulse::testing::SmolLm2Config;
using ::pulse::testing::TinyConfig;
using ::testing::HasSubstr;

TEST(ParameterCountTest, SmolLm2) {
  EXPECT_EQ(ParameterCount(SmolLm2Config()), 134'515'008);
  ModelConfig untied = SmolLm2Config();
  untied.tie_word_embeddings = false;
  EXPECT_EQ(ParameterCount(untied), 134'515'008 + 49152 * 576);
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
