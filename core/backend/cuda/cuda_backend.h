// The CUDA backend: bf16 weights, activations that feed a GEMM and KV cache; fp32 residual
// stream, GEMM outputs and accumulation. GEMMs go through cuBLASLt, everything else through
// the kernels of kernels.h, all on one stream. Ops are asynchronous: a failure is recorded and
// returned by the next Synchronize or CopyToHost.
//
// Without CUDA in the build, CreateCudaBackend returns Unimplemented and CudaDeviceCount 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/backend/backend.h"

namespace pulse {

struct CudaBackendOptions {
  int32_t device = 0;
  size_t memory_limit_bytes = 0;  // 0: the device's memory; else Allocate beyond it fails
};

absl::StatusOr<std::shared_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

bool CudaBackendCompiled();

// CUDA devices usable by this build: 0 without CUDA, a driver or a device.
int32_t CudaDeviceCount();

}  // namespace pulse
