// The CUDA backend: bf16 weights, activations that feed a GEMM and KV cache; fp32 residual
// stream, GEMM outputs and accumulation. GEMMs go through cuBLASLt, everything else through
// the kernels of kernels.h, all on one stream. Ops are asynchronous: a failure is recorded and
// returned by the next Synchronize or CopyToHost. Copy plans run on a second stream
// (cuda/copy_engine.h); the host tier is pinned, mapped memory.
//
// Without CUDA in the build, CreateCudaBackend returns Unimplemented and CudaDeviceCount 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/backend/backend.h"

namespace pulse {

struct CudaBackendOptions {
  int32_t device = 0;
  size_t memory_limit_bytes = 0;  // 0: the device's memory; else Allocate beyond it fails
  // Thread blocks (of 512 threads) of the copy engine's gather kernel, in [1, 1024]. 16 keep
  // 1 MiB of loads in flight, far past what PCIe's latency needs: measured on an H100, 16 move
  // 49-50 GB/s of a 55 GB/s link beside an HBM-bound kernel, which keeps 89% of its rate, where
  // 32 moved as much but cut it to 52% (samples/bench/results/README.md, "Recall engine").
  int32_t copy_gather_blocks = 16;
  // Decode attention splits each sequence's keys into at most this many thread blocks an SM, in
  // [1, 64]; within that, into the count that fills the last wave of blocks best
  // (cuda::DecodeAttentionSplits).
  int32_t decode_blocks_per_sm = 8;
  // GEMMs of at most this many rows (decode steps) time cuBLASLt's candidate algorithms on their
  // first call and keep the fastest (cuda/lt_gemm.h); 0 (the default): always the heuristic's
  // first. Off by default because the timed choice can differ from one process to the next, and
  // with it the low bits of the logits: greedy outputs would no longer repeat run to run.
  int32_t gemm_tune_max_rows = 0;
  // For tests: called with each copy that moves data and is enqueued outside a graph capture
  // (EnqueueCopy of chunks, EnqueueRecall, EnqueueWriteBack), numbered 0, 1, ...; true fails
  // that copy as it is enqueued (nothing of it is copied; the call returns Internal), as a copy
  // engine fault would. Empty: no faults.
  std::function<bool(int64_t copy)> copy_fault = nullptr;
};

absl::StatusOr<std::shared_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

bool CudaBackendCompiled();

// CUDA devices usable by this build: 0 without CUDA, a driver or a device.
int32_t CudaDeviceCount();

}  // namespace pulse
