// A tiny random-weight Llama on the CPU backend, and helpers that drive an engine over it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/model/model.h"
#include "core/model/tensor_source.h"
#include "core/sched/engine.h"
#include "gtest/gtest.h"

namespace pulse::testing {

inline ModelConfig TinyConfig() {
  ModelConfig config;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_layers = 2;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 8;
  config.vocab_size = 101;
  config.max_position = 256;
  config.rope_theta = 10000.0f;
  config.tie_word_embeddings = false;
  return config;
}

// `copy_delay`: how late each copy plan of the backend's copy engine lands; `copy_fault`: which
// copy plans fail; `slot_fault`: which offloaded layers find no device slot (CpuBackendOptions).
inline std::shared_ptr<const Model> LoadModel(const TensorSource& source, size_t memory_limit = 0,
                                              size_t host_memory_limit = 0,
                                              absl::Duration copy_delay = absl::ZeroDuration(),
                                              std::function<bool(int64_t)> copy_fault = nullptr,
                                              std::function<bool(int64_t)> slot_fault = nullptr) {
  CpuBackendOptions backend_options;
  backend_options.threads = 1;
  backend_options.memory_limit_bytes = memory_limit;
  backend_options.host_memory_limit_bytes = host_memory_limit;
  backend_options.copy_delay = copy_delay;
  backend_options.copy_fault = std::move(copy_fault);
  backend_options.slot_fault = std::move(slot_fault);
  absl::StatusOr<std::shared_ptr<Backend>> backend = CreateCpuBackend(backend_options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<std::shared_ptr<const Model>> model =
      Model::Load(*backend, source, {.weight_type = DType::kF32});
  EXPECT_TRUE(model.ok()) << model.status();
  return model.value_or(nullptr);
}

inline std::shared_ptr<const Model> TinyModel(const ModelConfig& config = TinyConfig(),
                                              size_t memory_limit = 0, size_t host_memory_limit = 0,
                                              absl::Duration copy_delay = absl::ZeroDuration(),
                                              std::function<bool(int64_t)> copy_fault = nullptr,
                                              std::function<bool(int64_t)> slot_fault = nullptr) {
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenRandomSource(config, /*seed=*/7);
  EXPECT_TRUE(source.ok()) << source.status();
  return LoadModel(**source, memory_limit, host_memory_limit, copy_delay, std::move(copy_fault),
                   std::move(slot_fault));
}

// Greedy sampling of up to `max_tokens` tokens, past end of sequence when `ignore_eos`.
inline SamplingParams Greedy(int32_t max_tokens, bool ignore_eos = false) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.ignore_eos = ignore_eos;
  return params;
}

inline std::unique_ptr<Engine> MakeEngine(std::shared_ptr<const Model> model,
                                          const EngineOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(std::move(model), options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(engine).value_or(nullptr);
}

// Steps until nothing is pending (failing the test past `max_steps`).
inline void RunToIdle(Engine& engine, int32_t max_steps = 10000) {
  for (int32_t step = 0; engine.pending() > 0; ++step) {
    ASSERT_LT(step, max_steps) << "the engine does not drain";
    const absl::StatusOr<StepReport> report = engine.Step();
    ASSERT_TRUE(report.ok()) << report.status();
  }
}

inline RequestSnapshot SnapshotOf(const Engine& engine, RequestId id) {
  absl::StatusOr<RequestSnapshot> snapshot = engine.Snapshot(id);
  EXPECT_TRUE(snapshot.ok()) << snapshot.status();
  return std::move(snapshot).value_or(RequestSnapshot{});
}

// A random prompt of `length` ids in [0, vocab).
inline std::vector<int32_t> Prompt(int32_t length, int32_t vocab, uint32_t seed) {
  std::vector<int32_t> prompt;
  uint32_t state = seed * 2654435761u + 1;
  for (int32_t i = 0; i < length; ++i) {
    state = state * 1664525u + 1013904223u;
    prompt.push_back(static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(vocab)));
  }
  return prompt;
}

}  // namespace pulse::testing
