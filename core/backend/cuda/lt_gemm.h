// y[m][n] = x[m][k] * w[n][k]^T (+ bias[n]) through cuBLASLt: bf16 operands, fp32 accumulation
// and output, the bias fused as an epilogue. The heuristic's algorithm is chosen once per shape
// and cached with its descriptors. Not thread-safe; the caller serializes.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "core/base/status.h"

namespace pulse::cuda {

class LtGemm {
 public:
  // `workspace` bytes of device memory at `workspace_data` (owned by the caller).
  static absl::StatusOr<LtGemm> Create(void* workspace_data, size_t workspace_bytes);
  LtGemm(LtGemm&&) noexcept;
  LtGemm& operator=(LtGemm&&) noexcept;
  ~LtGemm();

  absl::Status Run(const void* x, int64_t m, const void* w, int64_t n, int64_t k, const float* bias,
                   float* y, cudaStream_t stream);

 private:
  struct Plan;
  using Shape = std::tuple<int64_t, int64_t, int64_t, bool>;  // m, n, k, has bias

  LtGemm(cublasLtHandle_t handle, void* workspace_data, size_t workspace_bytes);
  absl::StatusOr<Plan*> FindPlan(const Shape& shape);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  absl::flat_hash_map<Shape, std::unique_ptr<Plan>> plans_;
};

}  // namespace pulse::cuda
