// The CUDA backend's copy engine: runs copy plans on a stream of its own, each with the executor
// its plan asks for (copy_plan.h). A gather plan's pieces travel to the device on the same
// stream, through a staging pair (pinned host and device arrays) that no plan in flight uses:
// no enqueue ever waits for the device. Staging grows to the largest plans in flight; growing
// allocates, which synchronizes the device, so it happens in the first steps only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "core/backend/copy_plan.h"
#include "core/backend/cuda/handles.h"
#include "core/backend/cuda/kernels.h"
#include "core/base/status.h"

namespace pulse::cuda {

class CopyEngine {
 public:
  // For the current device; gather kernels run on at most `gather_blocks` thread blocks.
  static absl::StatusOr<std::unique_ptr<CopyEngine>> Create(int32_t gather_blocks);
  CopyEngine(int32_t device, int32_t gather_blocks, UniqueStream stream);
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;
  // Waits for the plans in flight.
  ~CopyEngine();

  // Enqueues `plan` (which ValidateCopyPlan accepted) after `after` (when not null) and records
  // `done` at its end.
  absl::Status Enqueue(const CopyPlan& plan, cudaEvent_t after, cudaEvent_t done);
  // Enqueues what `launch` launches on the copy stream (`op` names it in errors) after `after`
  // and records `done` at its end.
  absl::Status EnqueueLaunch(cudaEvent_t after, cudaEvent_t done, std::string_view op,
                             absl::FunctionRef<cudaError_t(cudaStream_t)> launch);

 private:
  struct Staging;

  absl::Status Gather(const CopyPlan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status BatchDma(const CopyPlan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PerChunk(const CopyPlan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A staging pair that no plan in flight uses, holding at least `pieces` pieces.
  absl::StatusOr<Staging*> IdleStaging(size_t pieces) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t device_;
  const int32_t gather_blocks_;
  const UniqueStream stream_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Staging>> staging_ ABSL_GUARDED_BY(mu_);
  // cudaMemcpyBatchAsync's arguments, kept to reuse their memory.
  std::vector<void*> dsts_ ABSL_GUARDED_BY(mu_);
  std::vector<const void*> srcs_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> sizes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pulse::cuda
