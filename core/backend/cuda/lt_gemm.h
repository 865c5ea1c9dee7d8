// y[m][n] = x[m][k] * w[n][k]^T (+ bias[n]) through cuBLASLt: bf16 operands, fp32 accumulation
// and output, the bias fused as an epilogue. The algorithm is chosen once per shape and cached
// with its descriptors: the heuristic's first, or, for shapes of at most `tune_max_rows` rows
// (decode steps, where the heuristic's choice can be far from the bandwidth), the fastest of its
// candidates timed on the first call's own operands with the L2 cache flushed before each run.
// Not thread-safe; the caller serializes.
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
  // `workspace` bytes of device memory at `workspace_data` (owned by the caller); 0 rows: never
  // time.
  static absl::StatusOr<LtGemm> Create(void* workspace_data, size_t workspace_bytes,
                                       int64_t tune_max_rows);
  LtGemm(LtGemm&&) noexcept;
  LtGemm& operator=(LtGemm&&) noexcept;
  ~LtGemm();

  absl::Status Run(const void* x, int64_t m, const void* w, int64_t n, int64_t k, const float* bias,
                   float* y, cudaStream_t stream);

 private:
  struct Plan;
  using Shape = std::tuple<int64_t, int64_t, int64_t, bool>;  // m, n, k, has bias

  LtGemm(cublasLtHandle_t handle, void* workspace_data, size_t workspace_bytes,
         int64_t tune_max_rows);
  absl::StatusOr<Plan*> FindPlan(const Shape& shape);
  cublasStatus_t Matmul(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const void* x,
                        const void* w, float* y, cudaStream_t stream);
  // Times each of plan's candidates on these operands and keeps the fastest in plan.algo.
  absl::Status Tune(Plan& plan, const void* x, const void* w, float* y, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int64_t tune_max_rows_ = 0;
  absl::flat_hash_map<Shape, std::unique_ptr<Plan>> plans_;
};

}  // namespace pulse::cuda
