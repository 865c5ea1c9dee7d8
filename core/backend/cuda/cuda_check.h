// CUDA and cuBLASLt return codes as absl::Status.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "core/base/status.h"

namespace pulse::cuda {

// OK for cudaSuccess; otherwise Internal (ResourceExhausted for out-of-memory) naming `what`.
absl::Status CudaStatus(cudaError_t error, std::string_view what);
absl::Status CublasStatus(cublasStatus_t status, std::string_view what);

}  // namespace pulse::cuda

// Returns from the enclosing function when a CUDA runtime call fails.
#define PULSE_CUDA_RETURN_IF_ERROR(call) \
  PULSE_RETURN_IF_ERROR(::pulse::cuda::CudaStatus((call), #call))
#define PULSE_CUBLAS_RETURN_IF_ERROR(call) \
  PULSE_RETURN_IF_ERROR(::pulse::cuda::CublasStatus((call), #call))
