#include "core/backend/cuda/lt_gemm.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "core/backend/cuda/cuda_check.h"

namespace pulse::cuda {

// Descriptors of one shape and the algorithm the heuristic chose for it.
struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr;
  cublasLtMatrixLayout_t x_layout = nullptr;
  cublasLtMatrixLayout_t y_layout = nullptr;
  cublasLtMatmulAlgo_t algo = {};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (y_layout != nullptr) cublasLtMatrixLayoutDestroy(y_layout);
    if (x_layout != nullptr) cublasLtMatrixLayoutDestroy(x_layout);
    if (w_layout != nullptr) cublasLtMatrixLayoutDestroy(w_layout);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

absl::StatusOr<LtGemm> LtGemm::Create(void* workspace_data, size_t workspace_bytes) {
  cublasLtHandle_t handle = nullptr;
  PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  return LtGemm(handle, workspace_data, workspace_bytes);
}

LtGemm::LtGemm(cublasLtHandle_t handle, void* workspace_data, size_t workspace_bytes)
    : handle_(handle), workspace_(workspace_data), workspace_bytes_(workspace_bytes) {}

LtGemm::LtGemm(LtGemm&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      workspace_(other.workspace_),
      workspace_bytes_(other.workspace_bytes_),
      plans_(std::move(other.plans_)) {}

LtGemm& LtGemm::operator=(LtGemm&& other) noexcept {
  if (this != &other) {
    plans_.clear();
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    workspace_ = other.workspace_;
    workspace_bytes_ = other.workspace_bytes_;
    plans_ = std::move(other.plans_);
  }
  return *this;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

absl::StatusOr<LtGemm::Plan*> LtGemm::FindPlan(const Shape& shape) {
  if (const auto it = plans_.find(shape); it != plans_.end()) return it->second.get();
  const auto [m, n, k, has_bias] = shape;
  auto plan = std::make_unique<Plan>();
  PULSE_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: y^T [n][m] = w [k][n]^T * x^T [k][m].
  const cublasOperation_t transpose = CUBLAS_OP_T;
  const cublasOperation_t keep = CUBLAS_OP_N;
  PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  PULSE_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  if (has_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  }
  PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->w_layout, CUDA_R_16BF, k, n, k));
  PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->x_layout, CUDA_R_16BF, k, m, k));
  PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->y_layout, CUDA_R_32F, n, m, n));

  cublasLtMatmulPreference_t preference = nullptr;
  PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = workspace_bytes_;
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->w_layout, plan->x_layout,
                                            plan->y_layout, plan->y_layout, preference, 1, &result,
                                            &found);
  }
  cublasLtMatmulPreferenceDestroy(preference);
  PULSE_CUBLAS_RETURN_IF_ERROR(status);
  if (found == 0) {
    return absl::UnimplementedError(
        absl::StrFormat("cuBLASLt has no algorithm for a bf16 GEMM of m=%d n=%d k=%d", m, n, k));
  }
  plan->algo = result.algo;
  return plans_.emplace(shape, std::move(plan)).first->second.get();
}

absl::Status LtGemm::Run(const void* x, int64_t m, const void* w, int64_t n, int64_t k,
                         const float* bias, float* y, cudaStream_t stream) {
  if (m == 0) return absl::OkStatus();
  PULSE_ASSIGN_OR_RETURN(Plan * plan, FindPlan({m, n, k, bias != nullptr}));
  if (bias != nullptr) {
    PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
      handle_, plan->desc, &alpha, w, plan->w_layout, x, plan->x_layout, &beta, y, plan->y_layout,
      y, plan->y_layout, &plan->algo, workspace_, workspace_bytes_, stream));
  return absl::OkStatus();
}

}  // namespace pulse::cuda
