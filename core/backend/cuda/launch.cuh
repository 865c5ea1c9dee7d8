// Kernel launches that overlap a kernel's launch with the end of the one before it on the stream
// (programmatic dependent launch, sm_90 on): the next kernel's blocks may be scheduled before the
// previous grid has finished, so every kernel launched by LaunchKernel starts with
// WaitForPriorGrids(), which returns once the grids before it have completed and their writes are
// visible. Decode steps are chains of short kernels; this hides the gap between them.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace pulse::cuda {

// The first statement of every kernel LaunchKernel launches. It also lets the stream's next
// kernel be scheduled as this grid's blocks finish (that kernel waits in turn).
__device__ __forceinline__ void WaitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether the current device can launch programmatically (compute capability 9.0 or later).
bool ProgrammaticLaunchSupported();

// kernel<<<grid, block, shared_bytes, stream>>>(args...), launched programmatically where the
// device allows it. Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = ProgrammaticLaunchSupported() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace pulse::cuda
