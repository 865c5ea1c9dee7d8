#include "core/format/hf_config.h"

#include <cmath>
#include <numbers>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// meta-llama/Llama-3.1-8B's config.json.
constexpr std::string_view kLlama31Config = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// Llama 3.1's frequencies by the published recipe: keep wavelengths under 8192/4, divide those
// over 8192 by 8, blend linearly in 1/wavelength between the two.
std::vector<double> Llama31Frequencies() {
  std::vector<double> freqs;
  for (int i = 0; i < 64; ++i) {
    const long double base = 1.0L / std::pow(500000.0L, i / 64.0L);
    const long double wavelen = 2 * std::numbers::pi_v<long double> / base;
    if (wavelen < 2048) {
      freqs.push_back(static_cast<double>(base));
    } else if (wavelen > 8192) {
      freqs.push_back(static_cast<double>(base / 8));
    } else {
      const long double smooth = (8192 / wavelen - 1) / 3;
      freqs.push_back(static_cast<double>((1 - smooth) * base / 8 + smooth * base));
    }
  }
  return freqs;
}

TEST(HfConfigTest, Llama31) {
  absl::StatusOr<ModelConfig> config = ParseHfConfig(kLlama31Config);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kLlama);
  EXPECT_EQ(config->hidden_size, 4096);
  EXPECT_EQ(config->intermediate_size, 14336);
  EXPECT_EQ(config->num_layers, 32);
  EXPECT_EQ(config->num_heads, 32);
  EXPECT_EQ(config->num_kv_heads, 8);
  EXPECT_EQ(config->head_dim, 128);
  EXPECT_EQ(config->vocab_size, 128256);
  EXPECT_EQ(config->max_position, 131072);
  EXPECT_FLOAT_EQ(config->rms_norm_eps, 1e-5f);
  EXPECT_EQ(config->rope_theta, 500000.0f);
  EXPECT_EQ(config->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(config->rope_scaling.factor, 8.0f);
  EXPECT_EQ(config->rope_scaling.original_max_position, 8192);
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_EQ(config->bos_token_id, 128000);
  EXPECT_THAT(config->eos_token_ids, ElementsAre(128001));

  const std::vector<float> inv_freq = config->RopeInverseFrequencies();
  const std::vector<double> expected = Llama31Frequencies();
  ASSERT_EQ(inv_freq.size(), 64u);
  int kept = 0, divided = 0;
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(inv_freq[i], expected[i], expected[i] * 1e-6) << i;
    kept += inv_freq[i] == static_cast<float>(std::pow(500000.0L, -i / 64.0L));
    divided += inv_freq[i] == static_cast<float>(std::pow(500000.0L, -i / 64.0L) / 8);
  }
  // All three regimes occur at Llama 3.1's shapes.
  EXPECT_GT(kept, 20);
  EXPECT_GT(divided, 20);
  EXPECT_LT(kept + divided, 64);
}

TEST(HfConfigTest, TransformersFiveRopeParameters) {
  absl::StatusOr<ModelConfig> config = ParseHfConfig(R"({
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 100, "eos_token_id": [2, 3], "bos_token_id": null,
    "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1234.0}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_theta, 1234.0f);
  EXPECT_EQ(config->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(config->rope_scaling.factor, 2.0f);
  EXPECT_EQ(config->num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_EQ(config->head_dim, 16);     // defaults to hidden / heads
  EXPECT_EQ(config->max_position, 2048);
  EXPECT_FLOAT_EQ(config->rms_norm_eps, 1e-6f);
  EXPECT_EQ(config->bos_token_id, -1);
  EXPECT_THAT(config->eos_token_ids, ElementsAre(2, 3));
}

TEST(HfConfigTest, Qwen2AlwaysHasQkvBias) {
  absl::StatusOr<ModelConfig> config = ParseHfConfig(R"({
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "vocab_size": 151936, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    "sliding_window": 4096, "use_sliding_window": false, "tie_word_embeddings": true,
    "eos_token_id": 151643, "bos_token_id": 151643})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kQwen2);
  EXPECT_TRUE(config->attention_bias);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->max_position, 32768);  // the window is off
  EXPECT_EQ(config->rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(HfConfigTest, MistralSlidingWindowCapsTheContext) {
  constexpr std::string_view kBase = R"({
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, )";
  absl::StatusOr<ModelConfig> windowed =
      ParseHfConfig(std::string(kBase) + R"("sliding_window": 4096})");
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ(windowed->architecture, Architecture::kMistral);
  EXPECT_EQ(windowed->max_position, 4096);
  EXPECT_THAT(windowed->eos_token_ids, ElementsAre(2));  // transformers' default
  EXPECT_EQ(windowed->bos_token_id, 1);
  absl::StatusOr<ModelConfig> unwindowed =
      ParseHfConfig(std::string(kBase) + R"("sliding_window": null})");
  ASSERT_TRUE(unwindowed.ok()) << unwindowed.status();
  EXPECT_EQ(unwindowed->max_position, 32768);
}

std::string Error(std::string_view json) {
  const absl::StatusOr<ModelConfig> config = ParseHfConfig(json);
  EXPECT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

TEST(HfConfigTest, ErrorsNameTheProblem) {
  EXPECT_THAT(Error(R"({"architectures": ["GemmaForCausalLM"]})"),
              HasSubstr("unsupported architecture 'GemmaForCausalLM'"));
  EXPECT_THAT(Error(R"({"model_type": "gemma"})"), HasSubstr("'gemma'"));
  EXPECT_THAT(Error(R"({"hidden_size": 1})"), HasSubstr("names the architecture"));
  EXPECT_THAT(Error(R"({"model_type": "llama", )"), HasSubstr("config.json"));
  EXPECT_THAT(Error("[1, 2]"), HasSubstr("not a JSON object"));
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  EXPECT_THAT(Error(R"({"model_type": "llama", "extra": )" + deep + "}"),
              HasSubstr("config.json: JSON nested more than"));

  const std::string base = R"({"model_type": "llama", "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, )";
  EXPECT_THAT(Error(base + R"("hidden_size": "64"})"),
              HasSubstr("'hidden_size' is not an integer"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64.5})"),
              HasSubstr("'hidden_size' is not an integer"));
  EXPECT_THAT(Error(base + R"("hidden_size": 1000000000000})"),
              HasSubstr("'hidden_size' = 1000000000000 does not fit in int32"));
  EXPECT_THAT(Error(base + R"("vocab_size2": 1})"), HasSubstr("'hidden_size' is missing"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "rope_scaling": {"rope_type": "yarn",
      "factor": 4.0}})"),
              HasSubstr("'rope_scaling.rope_type' = 'yarn' is not supported"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "rope_scaling": {"type": "linear"}})"),
              HasSubstr("'rope_scaling.factor' is missing"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "rope_scaling": {"rope_type": "llama3",
      "factor": 8.0}})"),
              HasSubstr("'rope_scaling.low_freq_factor' is missing"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "rope_scaling": 3})"),
              HasSubstr("'rope_scaling' is not an object"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "hidden_act": "gelu"})"),
              HasSubstr("'hidden_act' = 'gelu' is not supported"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "mlp_bias": true})"), HasSubstr("mlp_bias"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "eos_token_id": ["2"]})"),
              HasSubstr("'eos_token_id[0]' is not an integer"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "eos_token_id": 100})"),
              HasSubstr("eos_token_id = 100 is outside the vocabulary"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "tie_word_embeddings": 1})"),
              HasSubstr("'tie_word_embeddings' is not a boolean"));
  EXPECT_THAT(Error(base + R"("hidden_size": 64, "num_key_value_heads": 3})"),
              HasSubstr("not a multiple"));
}

}  // namespace
}  // namespace pulse
