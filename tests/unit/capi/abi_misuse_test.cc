// Misuse of the ABI: NULL handles and out-pointers to every function, values out of range, files
// that are missing or not models. Each gives its status and a message naming the problem, and
// never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "pulseinfer/pulseinfer.h"
#include "tiny_model.h"

namespace {

using pulse::capi_test::CreateTinyEngine;
using pulse::capi_test::GreedySampling;
using pulse::capi_test::kTinyContext;
using pulse::capi_test::kTinyVocab;
using pulse::capi_test::LoadTinyModel;
using pulse::capi_test::TinyConfigPath;
using pulse::capi_test::TinyPrompt;
using pulse::capi_test::WriteTempFile;

std::string LastError() { return pulse_last_error(); }

#define EXPECT_FAILS_WITH(call, status, text)                                             \
  do {                                                                                    \
    EXPECT_EQ((call), (status)) << #call << ": " << LastError();                          \
    EXPECT_NE(LastError().find(text), std::string::npos) << #call << ": " << LastError(); \
  } while (false)

class AbiMisuse : public testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadTinyModel();
    ASSERT_NE(model_, nullptr);
    engine_ = CreateTinyEngine(model_);
    ASSERT_NE(engine_, nullptr);
  }
  void TearDown() override {
    pulse_engine_free(engine_);
    pulse_model_free(model_);
  }

  // Submits `prompt`; returns its status (and the id in *id).
  pulse_status Submit(const std::vector<int32_t>& prompt, const pulse_sampling_params& sampling,
                      uint64_t* id) {
    return pulse_request_submit(engine_, prompt.data(), prompt.size(), &sampling, nullptr, nullptr,
                                id);
  }

  pulse_model* model_ = nullptr;
  pulse_engine* engine_ = nullptr;
};

TEST_F(AbiMisuse, NullArgumentsToModelFunctions) {
  EXPECT_FAILS_WITH(pulse_model_params_init(nullptr, sizeof(pulse_model_params)),
                    PULSE_INVALID_ARGUMENT, "pulse_model_params is NULL");
  pulse_model* model = model_;
  EXPECT_FAILS_WITH(pulse_model_load(nullptr, nullptr, &model), PULSE_INVALID_ARGUMENT,
                    "pulse_model_load: path is NULL");
  EXPECT_EQ(model, nullptr);
  EXPECT_FAILS_WITH(pulse_model_load("x.gguf", nullptr, nullptr), PULSE_INVALID_ARGUMENT,
                    "out_model is NULL");
  pulse_model_info info;
  info.struct_size = sizeof(info);
  EXPECT_FAILS_WITH(pulse_model_info_get(nullptr, &info), PULSE_INVALID_ARGUMENT, "model is NULL");
  EXPECT_FAILS_WITH(pulse_model_info_get(model_, nullptr), PULSE_INVALID_ARGUMENT,
                    "pulse_model_info is NULL");
}

TEST_F(AbiMisuse, NullArgumentsToEngineFunctions) {
  EXPECT_FAILS_WITH(pulse_engine_params_init(nullptr, sizeof(pulse_engine_params)),
                    PULSE_INVALID_ARGUMENT, "pulse_engine_params is NULL");
  pulse_engine* engine = engine_;
  EXPECT_FAILS_WITH(pulse_engine_create(nullptr, nullptr, &engine), PULSE_INVALID_ARGUMENT,
                    "model is NULL");
  EXPECT_EQ(engine, nullptr);
  EXPECT_FAILS_WITH(pulse_engine_create(model_, nullptr, nullptr), PULSE_INVALID_ARGUMENT,
                    "out_engine is NULL");
  pulse_step_report report;
  report.struct_size = sizeof(report);
  EXPECT_FAILS_WITH(pulse_engine_step(nullptr, &report), PULSE_INVALID_ARGUMENT, "engine is NULL");
  EXPECT_FAILS_WITH(pulse_engine_step(nullptr, nullptr), PULSE_INVALID_ARGUMENT, "engine is NULL");
  EXPECT_FAILS_WITH(pulse_engine_run(nullptr), PULSE_INVALID_ARGUMENT, "engine is NULL");
}

TEST_F(AbiMisuse, NullArgumentsToRequestFunctions) {
  const std::vector<int32_t> prompt = TinyPrompt(4);
  const pulse_sampling_params sampling = GreedySampling(2);
  uint64_t id = 99;
  EXPECT_FAILS_WITH(pulse_sampling_params_init(nullptr, sizeof(pulse_sampling_params)),
                    PULSE_INVALID_ARGUMENT, "pulse_sampling_params is NULL");
  EXPECT_FAILS_WITH(
      pulse_request_submit(nullptr, prompt.data(), prompt.size(), &sampling, nullptr, nullptr, &id),
      PULSE_INVALID_ARGUMENT, "engine is NULL");
  EXPECT_EQ(id, 0u);
  EXPECT_FAILS_WITH(pulse_request_submit(engine_, nullptr, 3, &sampling, nullptr, nullptr, &id),
                    PULSE_INVALID_ARGUMENT, "tokens is NULL but count is 3");
  EXPECT_FAILS_WITH(
      pulse_request_submit(engine_, prompt.data(), 0, &sampling, nullptr, nullptr, &id),
      PULSE_INVALID_ARGUMENT, "the prompt is empty");
  EXPECT_FAILS_WITH(pulse_request_submit(engine_, prompt.data(), prompt.size(), &sampling, nullptr,
                                         nullptr, nullptr),
                    PULSE_INVALID_ARGUMENT, "out_id is NULL");

  ASSERT_EQ(Submit(prompt, sampling, &id), PULSE_OK) << LastError();
  int32_t tokens[4];
  size_t count = 7;
  pulse_request_state state;
  EXPECT_FAILS_WITH(pulse_request_cancel(nullptr, id), PULSE_INVALID_ARGUMENT, "engine is NULL");
  EXPECT_FAILS_WITH(pulse_request_poll(nullptr, id, tokens, 4, &count, &state),
                    PULSE_INVALID_ARGUMENT, "engine is NULL");
  EXPECT_EQ(count, 0u);
  EXPECT_FAILS_WITH(pulse_request_poll(engine_, id, nullptr, 4, &count, &state),
                    PULSE_INVALID_ARGUMENT, "tokens is NULL but capacity is 4");
  EXPECT_FAILS_WITH(pulse_request_poll(engine_, id, tokens, 4, nullptr, &state),
                    PULSE_INVALID_ARGUMENT, "out_count is NULL");
  EXPECT_FAILS_WITH(pulse_request_result(nullptr, id, tokens, 4, &count), PULSE_INVALID_ARGUMENT,
                    "engine is NULL");
  EXPECT_FAILS_WITH(pulse_request_result(engine_, id, nullptr, 4, &count), PULSE_INVALID_ARGUMENT,
                    "tokens is NULL but capacity is 4");
  EXPECT_FAILS_WITH(pulse_request_result(engine_, id, tokens, 4, nullptr), PULSE_INVALID_ARGUMENT,
                    "out_count is NULL");
  pulse_request_stats stats;
  stats.struct_size = sizeof(stats);
  EXPECT_FAILS_WITH(pulse_request_stats_get(nullptr, id, &stats), PULSE_INVALID_ARGUMENT,
                    "engine is NULL");
  EXPECT_FAILS_WITH(pulse_request_stats_get(engine_, id, nullptr), PULSE_INVALID_ARGUMENT,
                    "pulse_request_stats is NULL");
  EXPECT_FAILS_WITH(pulse_request_release(nullptr, id), PULSE_INVALID_ARGUMENT, "engine is NULL");
}

TEST_F(AbiMisuse, UnknownRequestIds) {
  constexpr uint64_t kUnknown = 123456789;
  int32_t tokens[4];
  size_t count = 0;
  pulse_request_stats stats;
  stats.struct_size = sizeof(stats);
  EXPECT_EQ(pulse_request_cancel(engine_, kUnknown), PULSE_NOT_FOUND);
  EXPECT_NE(LastError().find("123456789"), std::string::npos) << LastError();
  EXPECT_EQ(pulse_request_poll(engine_, kUnknown, tokens, 4, &count, nullptr), PULSE_NOT_FOUND);
  EXPECT_EQ(pulse_request_result(engine_, kUnknown, tokens, 4, &count), PULSE_NOT_FOUND);
  EXPECT_EQ(pulse_request_stats_get(engine_, kUnknown, &stats), PULSE_NOT_FOUND);
  EXPECT_EQ(pulse_request_release(engine_, kUnknown), PULSE_NOT_FOUND);
  EXPECT_EQ(pulse_request_cancel(engine_, 0), PULSE_NOT_FOUND);
}

TEST_F(AbiMisuse, SamplingValuesOutOfRange) {
  const std::vector<int32_t> prompt = TinyPrompt(4);
  uint64_t id = 0;
  pulse_sampling_params sampling = GreedySampling(4);
  sampling.max_tokens = -1;
  EXPECT_FAILS_WITH(Submit(prompt, sampling, &id), PULSE_INVALID_ARGUMENT, "max_tokens");
  sampling = GreedySampling(4);
  sampling.top_p = 1.5f;
  EXPECT_FAILS_WITH(Submit(prompt, sampling, &id), PULSE_INVALID_ARGUMENT, "top_p");
  sampling = GreedySampling(4);
  sampling.temperature = NAN;
  EXPECT_FAILS_WITH(Submit(prompt, sampling, &id), PULSE_INVALID_ARGUMENT, "temperature");
  sampling = GreedySampling(4);
  sampling.top_k = -2;
  EXPECT_FAILS_WITH(Submit(prompt, sampling, &id), PULSE_INVALID_ARGUMENT, "top_k");
  sampling = GreedySampling(4);
  sampling.stop_token_count = 2;
  EXPECT_FAILS_WITH(Submit(prompt, sampling, &id), PULSE_INVALID_ARGUMENT,
                    "stop_token_ids is NULL but stop_token_count is 2");
  const int32_t bad_stop = kTinyVocab;
  sampling.stop_token_ids = &bad_stop;
  sampling.stop_token_count = 1;
  EXPECT_FAILS_WITH(Submit(prompt, sampling, &id), PULSE_INVALID_ARGUMENT, "stop token");
  sampling = GreedySampling(4);
  sampling.struct_size = 8;
  EXPECT_FAILS_WITH(Submit(prompt, sampling, &id), PULSE_INVALID_ARGUMENT,
                    "pulse_sampling_params.struct_size is 8");
  EXPECT_EQ(id, 0u);
}

TEST_F(AbiMisuse, PromptTokensOutsideTheVocabularyOrContext) {
  uint64_t id = 0;
  const pulse_sampling_params sampling = GreedySampling(4);
  EXPECT_EQ(Submit({5, kTinyVocab, 7}, sampling, &id), PULSE_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find(std::to_string(kTinyVocab)), std::string::npos) << LastError();
  EXPECT_EQ(Submit({5, -1}, sampling, &id), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(Submit(TinyPrompt(kTinyContext), sampling, &id), PULSE_INVALID_ARGUMENT) << LastError();
  EXPECT_EQ(id, 0u);
}

TEST_F(AbiMisuse, EngineParamsOutOfRange) {
  pulse_engine_params params;
  ASSERT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  params.max_batch = 0;
  pulse_engine* engine = nullptr;
  EXPECT_FAILS_WITH(pulse_engine_create(model_, &params, &engine), PULSE_INVALID_ARGUMENT,
                    "max_batch");
  EXPECT_EQ(engine, nullptr);
  ASSERT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  params.block_tokens = -5;
  EXPECT_FAILS_WITH(pulse_engine_create(model_, &params, &engine), PULSE_INVALID_ARGUMENT,
                    "block_tokens");
  ASSERT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  params.micro_batches = 9;
  EXPECT_FAILS_WITH(pulse_engine_create(model_, &params, &engine), PULSE_INVALID_ARGUMENT,
                    "micro_batches");
}

TEST_F(AbiMisuse, ReleaseWhileQueuedIsAPreconditionFailure) {
  uint64_t id = 0;
  ASSERT_EQ(Submit(TinyPrompt(4), GreedySampling(2), &id), PULSE_OK) << LastError();
  EXPECT_EQ(pulse_request_release(engine_, id), PULSE_FAILED_PRECONDITION);
  EXPECT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  EXPECT_EQ(pulse_request_release(engine_, id), PULSE_OK) << LastError();
  EXPECT_EQ(pulse_request_release(engine_, id), PULSE_NOT_FOUND);
}

// Stepping from a token callback would wait for the step the callback runs in: both calls are
// refused with a status, and the request finishes.
TEST_F(AbiMisuse, SteppingFromATokenCallbackIsAPreconditionFailure) {
  struct Calls {
    pulse_engine* engine;
    std::vector<pulse_status> statuses;
  } calls{engine_, {}};
  const pulse_token_callback callback = [](void* user, const pulse_token_event*) {
    auto* calls = static_cast<Calls*>(user);
    pulse_step_report report;
    report.struct_size = sizeof(report);
    calls->statuses.push_back(pulse_engine_step(calls->engine, &report));
    calls->statuses.push_back(pulse_engine_run(calls->engine));
    return 0;
  };
  const std::vector<int32_t> prompt = TinyPrompt(4);
  const pulse_sampling_params sampling = GreedySampling(2);
  uint64_t id = 0;
  ASSERT_EQ(
      pulse_request_submit(engine_, prompt.data(), prompt.size(), &sampling, callback, &calls, &id),
      PULSE_OK)
      << LastError();
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  EXPECT_EQ(calls.statuses, std::vector<pulse_status>(4, PULSE_FAILED_PRECONDITION));
  size_t count = 0;
  EXPECT_EQ(pulse_request_result(engine_, id, nullptr, 0, &count), PULSE_OK);
  EXPECT_EQ(count, 2u);
}

pulse_status LoadWith(const std::string& path, const char* backend, const char* weight_type,
                      int random_weights, pulse_model** model) {
  pulse_model_params params;
  EXPECT_EQ(pulse_model_params_init(&params, sizeof(params)), PULSE_OK);
  params.backend = backend;
  params.weight_type = weight_type;
  params.random_weights = random_weights;
  return pulse_model_load(path.c_str(), &params, model);
}

TEST(AbiModelFiles, BadModelParams) {
  const std::string config = TinyConfigPath();
  pulse_model* model = nullptr;
  EXPECT_FAILS_WITH(LoadWith(config, "cpu", "int3", 1, &model), PULSE_INVALID_ARGUMENT,
                    "weight_type is 'int3'");
  EXPECT_FAILS_WITH(LoadWith(config, "tpu", "auto", 1, &model), PULSE_INVALID_ARGUMENT,
                    "backend is 'tpu'");
  pulse_model_params params;
  ASSERT_EQ(pulse_model_params_init(&params, sizeof(params)), PULSE_OK);
  params.threads = -1;
  EXPECT_FAILS_WITH(pulse_model_load(config.c_str(), &params, &model), PULSE_INVALID_ARGUMENT,
                    "threads is -1");
  params.threads = 0;
  params.struct_size = 0;
  EXPECT_FAILS_WITH(pulse_model_load(config.c_str(), &params, &model), PULSE_INVALID_ARGUMENT,
                    "pulse_model_params.struct_size is 0");
  EXPECT_EQ(model, nullptr);
}

TEST(AbiModelFiles, CudaIsUnsupportedWithoutACudaDevice) {
  if ((pulse_features() & PULSE_FEATURE_CUDA_DEVICE) != 0)
    GTEST_SKIP() << "a CUDA device is present";
  pulse_model* model = nullptr;
  EXPECT_FAILS_WITH(LoadWith(TinyConfigPath(), "cuda", "auto", 1, &model), PULSE_UNSUPPORTED,
                    "CUDA");
  EXPECT_EQ(model, nullptr);
}

TEST(AbiModelFiles, MissingFileIsNotFound) {
  pulse_model* model = nullptr;
  const std::string path = testing::TempDir() + "/no_such_model.gguf";
  EXPECT_FAILS_WITH(LoadWith(path, "auto", "auto", 0, &model), PULSE_NOT_FOUND, path);
  EXPECT_FAILS_WITH(LoadWith(path, "auto", "auto", 1, &model), PULSE_NOT_FOUND, path);
  EXPECT_EQ(model, nullptr);
}

TEST(AbiModelFiles, FileThatIsNotAModelIsInvalidModel) {
  pulse_model* model = nullptr;
  const std::string text = WriteTempFile("notes.txt", "these are not weights\n");
  EXPECT_EQ(LoadWith(text, "auto", "auto", 0, &model), PULSE_INVALID_MODEL) << LastError();
  EXPECT_NE(LastError().find("notes.txt"), std::string::npos) << LastError();
  const std::string bad_json = WriteTempFile("config.json", "{\"hidden_size\": ");
  EXPECT_EQ(LoadWith(bad_json, "auto", "auto", 1, &model), PULSE_INVALID_MODEL) << LastError();
  const std::string bad_shapes = WriteTempFile(
      "config.json", R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 3,
      "vocab_size": 300})");
  EXPECT_EQ(LoadWith(bad_shapes, "auto", "auto", 1, &model), PULSE_INVALID_MODEL) << LastError();
  EXPECT_EQ(model, nullptr);
}

TEST(AbiModelFiles, MemoryLimitGivesOutOfMemory) {
  const std::string config = TinyConfigPath();
  pulse_model_params params;
  ASSERT_EQ(pulse_model_params_init(&params, sizeof(params)), PULSE_OK);
  params.random_weights = 1;
  params.memory_limit_bytes = 4096;  // far below the tiny model's weights
  pulse_model* model = nullptr;
  EXPECT_EQ(pulse_model_load(config.c_str(), &params, &model), PULSE_OUT_OF_MEMORY) << LastError();
  EXPECT_EQ(model, nullptr);

  params.memory_limit_bytes = 8 << 20;  // the weights fit, a KV cache of 2^20 tokens does not
  ASSERT_EQ(pulse_model_load(config.c_str(), &params, &model), PULSE_OK) << LastError();
  pulse_engine_params engine_params;
  ASSERT_EQ(pulse_engine_params_init(&engine_params, sizeof(engine_params)), PULSE_OK);
  engine_params.kv_capacity_tokens = int64_t{1} << 20;
  pulse_engine* engine = nullptr;
  EXPECT_EQ(pulse_engine_create(model, &engine_params, &engine), PULSE_OUT_OF_MEMORY)
      << LastError();
  EXPECT_EQ(engine, nullptr);
  pulse_model_free(model);
}

}  // namespace
