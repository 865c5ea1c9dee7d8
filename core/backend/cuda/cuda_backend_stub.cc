// CreateCudaBackend of a build without CUDA.
#include "core/backend/cuda/cuda_backend.h"

namespace pulse {

absl::StatusOr<std::shared_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions&) {
  return absl::UnimplementedError("this build of libpulseinfer has no CUDA backend");
}

bool CudaBackendCompiled() { return false; }

int32_t CudaDeviceCount() { return 0; }

}  // namespace pulse
