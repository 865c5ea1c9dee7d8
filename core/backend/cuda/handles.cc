#include "core/backend/cuda/handles.h"

#include "core/backend/cuda/cuda_check.h"

namespace pulse::cuda {

absl::StatusOr<UniqueStream> CreateStream() {
  cudaStream_t stream = nullptr;
  PULSE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return UniqueStream(stream);
}

absl::StatusOr<UniqueEvent> CreateEvent(unsigned int flags) {
  cudaEvent_t event = nullptr;
  PULSE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
  return UniqueEvent(event);
}

absl::StatusOr<UniquePinned> AllocatePinned(size_t bytes, unsigned int flags) {
  void* data = nullptr;
  PULSE_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&data, bytes, flags));
  return UniquePinned(data);
}

absl::StatusOr<UniqueDevice> AllocateDevice(size_t bytes) {
  void* data = nullptr;
  PULSE_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes));
  return UniqueDevice(data);
}

}  // namespace pulse::cuda
