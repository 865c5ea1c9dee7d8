#include "core/backend/cuda/handles.h"

#include "core/backend/cuda/cuda_check.h"

namespace pulse::cuda {

absl::StatusOr<UniqueStream> CreateStream(StreamPriority priority) {
  int least = 0;
  int greatest = 0;
  PULSE_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t stream = nullptr;
  PULSE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(
      &stream, cudaStreamNonBlocking, priority == StreamPriority::kHighest ? greatest : least));
  return UniqueStream(stream);
}

absl::StatusOr<UniqueEvent> CreateEvent(unsigned int flags) {
  cudaEvent_t event = nullptr;
  PULSE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
  return UniqueEvent(event);
}

absl::StatusOr<bool> EventCompleted(cudaEvent_t event) {
  const cudaError_t state = cudaEventQuery(event);
  if (state == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  PULSE_CUDA_RETURN_IF_ERROR(state);
  return true;
}

// A failed allocation is not sticky; clear it so that the next launch check does not see it.
absl::StatusOr<UniquePinned> AllocatePinned(size_t bytes, unsigned int flags) {
  void* data = nullptr;
  if (const cudaError_t error = cudaHostAlloc(&data, bytes, flags); error != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(error, "cudaHostAlloc");
  }
  return UniquePinned(data);
}

absl::StatusOr<UniqueDevice> AllocateDevice(size_t bytes) {
  void* data = nullptr;
  if (const cudaError_t error = cudaMalloc(&data, bytes); error != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(error, "cudaMalloc");
  }
  return UniqueDevice(data);
}

absl::StatusOr<UniqueGraphExec> InstantiateGraph(cudaGraph_t graph) {
  cudaGraphExec_t exec = nullptr;
  PULSE_CUDA_RETURN_IF_ERROR(
      cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
  return UniqueGraphExec(exec);
}

}  // namespace pulse::cuda
