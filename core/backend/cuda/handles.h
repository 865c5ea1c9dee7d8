// Owners of CUDA runtime handles and allocations: each releases its handle once, when destroyed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>

#include "core/base/status.h"

namespace pulse::cuda {

struct StreamDeleter {
  void operator()(cudaStream_t stream) const { cudaStreamDestroy(stream); }
};
struct EventDeleter {
  void operator()(cudaEvent_t event) const { cudaEventDestroy(event); }
};
struct PinnedDeleter {
  void operator()(void* data) const { cudaFreeHost(data); }
};
struct DeviceDeleter {
  void operator()(void* data) const { cudaFree(data); }
};
struct GraphDeleter {
  void operator()(cudaGraph_t graph) const { cudaGraphDestroy(graph); }
};
struct GraphExecDeleter {
  void operator()(cudaGraphExec_t exec) const { cudaGraphExecDestroy(exec); }
};

using UniqueStream = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
using UniqueEvent = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;
using UniquePinned = std::unique_ptr<void, PinnedDeleter>;
using UniqueDevice = std::unique_ptr<void, DeviceDeleter>;
using UniqueGraph = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDeleter>;
using UniqueGraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

enum class StreamPriority { kDefault, kHighest };

// A stream that does not synchronize with the legacy default stream. Where SMs are contended,
// the thread blocks of a kHighest stream's kernels are scheduled before those of a kDefault one.
absl::StatusOr<UniqueStream> CreateStream(StreamPriority priority = StreamPriority::kDefault);
absl::StatusOr<UniqueEvent> CreateEvent(unsigned int flags);
// Whether the work `event` stands for has completed (cudaEventQuery without the sticky "not
// ready" that a later launch check would read as its own failure).
absl::StatusOr<bool> EventCompleted(cudaEvent_t event);
// Page-locked host memory (cudaHostAlloc with `flags`).
absl::StatusOr<UniquePinned> AllocatePinned(size_t bytes, unsigned int flags);
absl::StatusOr<UniqueDevice> AllocateDevice(size_t bytes);
// An executable graph of `graph`'s nodes (cudaGraphInstantiate); each kernel node keeps the
// priority of the stream it was captured from.
absl::StatusOr<UniqueGraphExec> InstantiateGraph(cudaGraph_t graph);

}  // namespace pulse::cuda
