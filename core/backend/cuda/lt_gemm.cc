#include "core/backend/cuda/lt_gemm.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/handles.h"

namespace pulse::cuda {
namespace {

constexpr int kCandidates = 8;  // heuristic results timed for a small shape
constexpr int kTimedRuns = 3;   // a candidate's time: the fastest of these runs
// Written before each timed run: twice the 60 MB L2 of an H100/H200, so the weights come from HBM
// as they do in a step.
constexpr size_t kFlushBytes = size_t{128} << 20;

}  // namespace

// Descriptors of one shape, the heuristic's candidate algorithms and the one chosen.
struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr;
  cublasLtMatrixLayout_t x_layout = nullptr;
  cublasLtMatrixLayout_t y_layout = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // until tuned

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

absl::StatusOr<LtGemm> LtGemm::Create(void* workspace_data, size_t workspace_bytes,
                                      int64_t tune_max_rows) {
  cublasLtHandle_t handle = nullptr;
  PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  return LtGemm(handle, workspace_data, workspace_bytes, tune_max_rows);
}

LtGemm::LtGemm(cublasLtHandle_t handle, void* workspace_data, size_t workspace_bytes,
               int64_t tune_max_rows)
    : handle_(handle),
      workspace_(workspace_data),
      workspace_bytes_(workspace_bytes),
      tune_max_rows_(tune_max_rows) {}

LtGemm::LtGemm(LtGemm&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      workspace_(other.workspace_),
      workspace_bytes_(other.workspace_bytes_),
      tune_max_rows_(other.tune_max_rows_),
      plans_(std::move(other.plans_)) {}

LtGemm& LtGemm::operator=(LtGemm&& other) noexcept {
  if (this != &other) {
    plans_.clear();
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    workspace_ = other.workspace_;
    workspace_bytes_ = other.workspace_bytes_;
    tune_max_rows_ = other.tune_max_rows_;
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
  const int wanted = m <= tune_max_rows_ ? kCandidates : 1;
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(wanted));
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->w_layout, plan->x_layout,
                                            plan->y_layout, plan->y_layout, preference, wanted,
                                            results.data(), &found);
  }
  cublasLtMatmulPreferenceDestroy(preference);
  PULSE_CUBLAS_RETURN_IF_ERROR(status);
  if (found == 0) {
    return absl::UnimplementedError(
        absl::StrFormat("cuBLASLt has no algorithm for a bf16 GEMM of m=%d n=%d k=%d", m, n, k));
  }
  plan->algo = results[0].algo;
  if (found > 1) {
    for (int i = 0; i < found; ++i)
      plan->candidates.push_back(results[static_cast<size_t>(i)].algo);
  }
  return plans_.emplace(shape, std::move(plan)).first->second.get();
}

cublasStatus_t LtGemm::Matmul(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const void* x,
                              const void* w, float* y, cudaStream_t stream) {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  return cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.w_layout, x, plan.x_layout, &beta, y,
                        plan.y_layout, y, plan.y_layout, &algo, workspace_, workspace_bytes_,
                        stream);
}

absl::Status LtGemm::Tune(Plan& plan, const void* x, const void* w, float* y, cudaStream_t stream) {
  // Outside the backend's memory limit, for the moment of the timing; no room: keep the first.
  absl::StatusOr<UniqueDevice> flush = AllocateDevice(kFlushBytes);
  if (!flush.ok()) return absl::OkStatus();
  PULSE_ASSIGN_OR_RETURN(UniqueEvent start, CreateEvent(cudaEventDefault));
  PULSE_ASSIGN_OR_RETURN(UniqueEvent stop, CreateEvent(cudaEventDefault));
  float best_ms = std::numeric_limits<float>::infinity();
  for (const cublasLtMatmulAlgo_t& algo : plan.candidates) {
    float fastest = std::numeric_limits<float>::infinity();
    for (int run = 0; run < kTimedRuns; ++run) {
      PULSE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flush->get(), run, kFlushBytes, stream));
      PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
      // A candidate this shape cannot run is skipped, not an error.
      if (Matmul(plan, algo, x, w, y, stream) != CUBLAS_STATUS_SUCCESS) break;
      PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream));
      PULSE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
      float ms = 0;
      PULSE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      fastest = std::min(fastest, ms);
    }
    if (fastest < best_ms) {
      best_ms = fastest;
      plan.algo = algo;
    }
  }
  return absl::OkStatus();
}

absl::Status LtGemm::Run(const void* x, int64_t m, const void* w, int64_t n, int64_t k,
                         const float* bias, float* y, cudaStream_t stream) {
  if (m == 0) return absl::OkStatus();
  PULSE_ASSIGN_OR_RETURN(Plan * plan, FindPlan({m, n, k, bias != nullptr}));
  if (bias != nullptr) {
    PULSE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PULSE_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  // Timing needs to run and wait: not inside a graph capture (tuned by the next uncaptured call).
  if (!plan->candidates.empty() && capture == cudaStreamCaptureStatusNone) {
    PULSE_RETURN_IF_ERROR(Tune(*plan, x, w, y, stream));
    plan->candidates.clear();
  }
  PULSE_CUBLAS_RETURN_IF_ERROR(Matmul(*plan, plan->algo, x, w, y, stream));
  return absl::OkStatus();
}

}  // namespace pulse::cuda
