#include "tiny_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace pulse::capi_test {
namespace {

std::filesystem::path FreshDirectory() {
  static std::atomic<int> counter{0};
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) /
      ("pulse_capi_" + std::to_string(getpid()) + "_" + std::to_string(counter.fetch_add(1)));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

std::string WriteTempFile(const std::string& name, const std::string& content) {
  const std::filesystem::path path = FreshDirectory() / name;
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

std::string TinyConfigPath() {
  const char* root = std::getenv("PULSE_SOURCE_DIR");
  EXPECT_NE(root, nullptr) << "PULSE_SOURCE_DIR is not set (ctest sets it)";
  return std::string(root == nullptr ? "." : root) + "/tests/data/tiny-llama.json";
}

pulse_model* LoadTinyModel(int32_t tensor_parallel_size) {
  pulse_model_params params;
  EXPECT_EQ(pulse_model_params_init(&params, sizeof(params)), PULSE_OK);
  params.random_weights = 1;
  params.random_seed = 7;
  params.threads = tensor_parallel_size > 1 ? tensor_parallel_size : 1;
  params.tensor_parallel_size = tensor_parallel_size;
  pulse_model* model = nullptr;
  const std::string config = TinyConfigPath();
  EXPECT_EQ(pulse_model_load(config.c_str(), &params, &model), PULSE_OK) << pulse_last_error();
  return model;
}

pulse_engine* CreateTinyEngine(pulse_model* model) {
  pulse_engine_params params;
  EXPECT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  params.block_tokens = 16;
  params.kv_capacity_tokens = 1024;
  pulse_engine* engine = nullptr;
  EXPECT_EQ(pulse_engine_create(model, &params, &engine), PULSE_OK) << pulse_last_error();
  return engine;
}

pulse_sampling_params GreedySampling(int max_tokens) {
  pulse_sampling_params params;
  EXPECT_EQ(pulse_sampling_params_init(&params, sizeof(params)), PULSE_OK);
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.ignore_eos = 1;
  return params;
}

std::vector<int32_t> TinyPrompt(int length) {
  std::vector<int32_t> prompt(length);
  for (int i = 0; i < length; ++i) prompt[i] = 3 + (i * 37) % (kTinyVocab - 3);
  return prompt;
}

}  // namespace pulse::capi_test
