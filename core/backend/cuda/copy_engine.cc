#include "core/backend/cuda/copy_engine.h"

#include <algorithm>
#include <utility>

#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/fp8_gather.h"

namespace pulse::cuda {
namespace {

constexpr size_t kMinStagingPieces = 4096;
// cudaMemcpyBatchAsync came in CUDA 12.8; 13.0 dropped its failure-index argument. This code
// uses the 13.0 form, as in /usr/local/cuda/include/cuda_runtime_api.h.
constexpr bool kHaveBatchDma = CUDART_VERSION >= 13000;

CopyExecutor Resolve(const CopyPlan& plan) {
  if (plan.executor != CopyExecutor::kAuto) return plan.executor;
  size_t bytes = 0;
  for (const CopyChunk& chunk : plan.chunks) bytes += chunk.bytes;
  const bool small_chunks = bytes < kAutoGatherMaxMeanChunkBytes * plan.chunks.size();
  return small_chunks || !kHaveBatchDma ? CopyExecutor::kGather : CopyExecutor::kBatchDma;
}

}  // namespace

struct CopyEngine::Staging {
  // Room for at least `pieces`; the old arrays must be idle.
  absl::Status Reserve(size_t pieces) {
    if (pieces <= capacity) return absl::OkStatus();
    const size_t grown = std::max({pieces, 2 * capacity, kMinStagingPieces});
    capacity = 0;
    host.reset();
    device.reset();
    PULSE_ASSIGN_OR_RETURN(host, AllocatePinned(grown * sizeof(GatherPiece), cudaHostAllocDefault));
    PULSE_ASSIGN_OR_RETURN(device, AllocateDevice(grown * sizeof(GatherPiece)));
    capacity = grown;
    return absl::OkStatus();
  }

  UniquePinned host;
  UniqueDevice device;
  UniqueEvent idle;     // recorded after the last plan that used these arrays
  size_t capacity = 0;  // pieces
};

absl::StatusOr<std::unique_ptr<CopyEngine>> CopyEngine::Create(int32_t gather_blocks) {
  int device = 0;
  PULSE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  PULSE_ASSIGN_OR_RETURN(UniqueStream stream, CreateStream(StreamPriority::kHighest));
  return std::make_unique<CopyEngine>(device, gather_blocks, std::move(stream));
}

CopyEngine::CopyEngine(int32_t device, int32_t gather_blocks, UniqueStream stream)
    : device_(device), gather_blocks_(gather_blocks), stream_(std::move(stream)) {}

CopyEngine::~CopyEngine() { cudaStreamSynchronize(stream_.get()); }

absl::Status CopyEngine::Enqueue(const CopyPlan& plan, cudaEvent_t after, cudaEvent_t done) {
  absl::MutexLock lock(&mu_);
  if (after != nullptr) PULSE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_.get(), after, 0));
  if (!plan.chunks.empty()) {
    // Only the gather kernel converts: a plan with a codec runs on it whatever its executor.
    const CopyExecutor executor =
        plan.codec == HostCodec::kRaw ? Resolve(plan) : CopyExecutor::kGather;
    if (executor == CopyExecutor::kGather) {
      PULSE_RETURN_IF_ERROR(Gather(plan));
    } else if (executor == CopyExecutor::kBatchDma) {
      PULSE_RETURN_IF_ERROR(BatchDma(plan));
    } else {
      PULSE_RETURN_IF_ERROR(PerChunk(plan));
    }
  }
  PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(done, stream_.get()));
  return absl::OkStatus();
}

absl::Status CopyEngine::EnqueueLaunch(cudaEvent_t after, cudaEvent_t done, std::string_view op,
                                       absl::FunctionRef<cudaError_t(cudaStream_t)> launch) {
  absl::MutexLock lock(&mu_);
  if (after != nullptr) PULSE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_.get(), after, 0));
  if (const cudaError_t error = launch(stream_.get()); error != cudaSuccess) {
    return CudaStatus(error, op);
  }
  PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(done, stream_.get()));
  return absl::OkStatus();
}

absl::Status CopyEngine::Gather(const CopyPlan& plan) {
  // A chunk of a plan with a codec is one block, which one piece names.
  const bool coded = plan.codec != HostCodec::kRaw;
  size_t count = 0;
  for (const CopyChunk& chunk : plan.chunks) {
    count += coded ? 1 : (chunk.bytes + kGatherPieceBytes - 1) / kGatherPieceBytes;
  }
  PULSE_ASSIGN_OR_RETURN(Staging * staging, IdleStaging(count));
  auto* pieces = static_cast<GatherPiece*>(staging->host.get());
  for (const CopyChunk& chunk : plan.chunks) {
    if (coded) {
      *pieces++ = {chunk.src, chunk.dst, 0};
      continue;
    }
    for (size_t offset = 0; offset < chunk.bytes; offset += kGatherPieceBytes) {
      const size_t bytes = std::min<size_t>(kGatherPieceBytes, chunk.bytes - offset);
      *pieces++ = {static_cast<const char*>(chunk.src) + offset,
                   static_cast<char*>(chunk.dst) + offset,
                   static_cast<uint32_t>(bytes / kCopyAlignment)};
    }
  }
  cudaStream_t stream = stream_.get();
  PULSE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging->device.get(), staging->host.get(),
                                             count * sizeof(GatherPiece), cudaMemcpyHostToDevice,
                                             stream));
  const auto* staged = static_cast<const GatherPiece*>(staging->device.get());
  const auto staged_count = static_cast<int64_t>(count);
  PULSE_CUDA_RETURN_IF_ERROR(coded ? LaunchFp8Gather(staged, staged_count,
                                                     plan.direction == CopyDirection::kHostToDevice,
                                                     plan.layout, gather_blocks_, stream)
                                   : LaunchGather(staged, staged_count, gather_blocks_, stream));
  PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging->idle.get(), stream));
  return absl::OkStatus();
}

absl::Status CopyEngine::BatchDma(const CopyPlan& plan) {
#if CUDART_VERSION < 13000
  return absl::UnimplementedError(
      "copy engine: kBatchDma needs the CUDA 13 runtime's cudaMemcpyBatchAsync");
#else
  dsts_.clear();
  srcs_.clear();
  sizes_.clear();
  for (const CopyChunk& chunk : plan.chunks) {
    dsts_.push_back(chunk.dst);
    srcs_.push_back(chunk.src);
    sizes_.push_back(chunk.bytes);
  }
  const cudaMemLocation host{.type = cudaMemLocationTypeHost, .id = 0};
  const cudaMemLocation device{.type = cudaMemLocationTypeDevice, .id = device_};
  const bool recall = plan.direction == CopyDirection::kHostToDevice;
  cudaMemcpyAttributes attributes{.srcAccessOrder = cudaMemcpySrcAccessOrderStream,
                                  .srcLocHint = recall ? host : device,
                                  .dstLocHint = recall ? device : host,
                                  .flags = cudaMemcpyFlagPreferOverlapWithCompute};
  size_t first_chunk = 0;  // the attributes apply from chunk 0 on
  PULSE_CUDA_RETURN_IF_ERROR(cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(),
                                                  dsts_.size(), &attributes, &first_chunk, 1,
                                                  stream_.get()));
  return absl::OkStatus();
#endif
}

absl::Status CopyEngine::PerChunk(const CopyPlan& plan) {
  const cudaMemcpyKind kind = plan.direction == CopyDirection::kHostToDevice
                                  ? cudaMemcpyHostToDevice
                                  : cudaMemcpyDeviceToHost;
  for (const CopyChunk& chunk : plan.chunks) {
    PULSE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(chunk.dst, chunk.src, chunk.bytes, kind, stream_.get()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CopyEngine::Staging*> CopyEngine::IdleStaging(size_t pieces) {
  Staging* idle = nullptr;
  for (const std::unique_ptr<Staging>& staging : staging_) {
    PULSE_ASSIGN_OR_RETURN(const bool completed, EventCompleted(staging->idle.get()));
    if (!completed) continue;
    if (staging->capacity >= pieces) return staging.get();
    if (idle == nullptr) idle = staging.get();
  }
  if (idle == nullptr) {
    auto staging = std::make_unique<Staging>();
    PULSE_ASSIGN_OR_RETURN(staging->idle, CreateEvent(cudaEventDisableTiming));
    idle = staging_.emplace_back(std::move(staging)).get();
  }
  PULSE_RETURN_IF_ERROR(idle->Reserve(pieces));
  return idle;
}

}  // namespace pulse::cuda
