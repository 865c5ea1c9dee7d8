// A small random-weight Llama on the backend a parameterized test names ("cpu" or "cuda"), for
// the runner-level tests that run on each backend: CUDA skips without a device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/model/model.h"
#include "core/model/tensor_source.h"
#include "gtest/gtest.h"

namespace pulse::testing {

// 2 layers of 4 query heads over 2 KV heads of 64 dims (a head size the CUDA kernels take).
inline ModelConfig SmallConfig(int32_t max_position) {
  return {.hidden_size = 256,
          .intermediate_size = 512,
          .num_layers = 2,
          .num_heads = 4,
          .num_kv_heads = 2,
          .head_dim = 64,
          .vocab_size = 512,
          .max_position = max_position};
}

// A parameterized test over backend names whose SetUp loads `config`'s random weights (`seed`)
// on its backend: fp32 on the CPU, bf16 on CUDA. `copy_fault`: the backend's copy fault hook
// (CpuBackendOptions and CudaBackendOptions::copy_fault).
class BackendModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void LoadOnBackend(const ModelConfig& config, uint32_t seed,
                     std::function<bool(int64_t)> copy_fault = nullptr) {
    std::shared_ptr<Backend> backend;
    if (GetParam() == "cuda") {
      if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
      absl::StatusOr<std::shared_ptr<Backend>> cuda =
          CreateCudaBackend({.copy_fault = std::move(copy_fault)});
      ASSERT_TRUE(cuda.ok()) << cuda.status();
      backend = *cuda;
    } else {
      absl::StatusOr<std::shared_ptr<Backend>> cpu =
          CreateCpuBackend({.threads = 2, .copy_fault = std::move(copy_fault)});
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      backend = *cpu;
    }
    absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenRandomSource(config, seed);
    ASSERT_TRUE(source.ok()) << source.status();
    absl::StatusOr<std::shared_ptr<const Model>> model = Model::Load(
        backend, **source, {.weight_type = GetParam() == "cuda" ? DType::kBF16 : DType::kF32});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *model;
  }

  std::shared_ptr<const Model> model_;
};

}  // namespace pulse::testing
