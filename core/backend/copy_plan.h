// Copy plans: the unit of work of a backend's copy engine (Backend::EnqueueCopy). A plan is a
// list of chunks moved in one direction between the host tier (Backend::AllocateHost) and device
// memory (Backend::Allocate): all misses of one layer across a batch (recall), or the blocks
// that filled in a step (write-back).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/backend/kv_codec.h"
#include "core/base/status.h"

namespace pulse {

// Every chunk's source, destination and size are multiples of this (the gather kernel moves
// 16-byte words; KV blocks and head fragments always are).
inline constexpr size_t kCopyAlignment = 16;

struct CopyChunk {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

enum class CopyDirection : uint8_t {
  kHostToDevice,  // recall: src in the host tier, dst in device memory
  kDeviceToHost,  // write-back: src in device memory, dst in the host tier
};

// How the CUDA backend moves a plan (the CPU backend memcpys every plan on its copy thread).
enum class CopyExecutor : uint8_t {
  // kGather below kAutoGatherMaxMeanChunkBytes a chunk on average, else kBatchDma. Measured in one
  // run on the H200 (samples/bench/results/history.jsonl, source h200-recall-6df1feb.jsonl): from
  // 64 KiB chunks DMA
  // reaches 99% of the link against the kernel's 91%, and it takes no SMs from compute (beside
  // an HBM-bound kernel the gather slowed it by 40%); at 4-8 KiB DMA manages 4-19%.
  kAuto,
  // One kernel on a few SMs copying 16-byte words through mapped host memory (zero-copy); the
  // same kernel scatters device->host for write-back.
  kGather,
  kBatchDma,  // one cudaMemcpyBatchAsync (CUDA 12.8+)
  kPerChunk,  // one cudaMemcpyAsync per chunk: the baseline
};

inline constexpr size_t kAutoGatherMaxMeanChunkBytes = size_t{64} << 10;

// "auto", "gather", "batch-dma", "per-chunk".
std::string_view CopyExecutorName(CopyExecutor executor);

struct CopyPlan {
  CopyDirection direction = CopyDirection::kHostToDevice;
  // Read by EnqueueCopy only: the list may be reused when it returns; the memory the chunks name
  // must stay allocated until the plan's event completes.
  std::span<const CopyChunk> chunks = {};
  CopyExecutor executor = CopyExecutor::kAuto;
  // Starts after the compute ops enqueued before the plan have completed: set it to write back
  // blocks that compute just filled, or to recall into slots that compute may still be reading.
  bool after_compute = false;
  // With a codec other than kRaw each chunk is one block of `layout`: its device side the block
  // (`bytes`, layout.block_bytes()), its host side the block in the host tier's form
  // (HostBlockBytes(layout, codec) bytes), which the copy decodes or encodes.
  HostCodec codec = HostCodec::kRaw;
  PagedKvLayout layout = {};
};

// OK when every chunk has non-null, kCopyAlignment-aligned pointers and a nonzero size that is a
// multiple of kCopyAlignment (on each side, with a codec: a whole block of an f32 or bf16 layout),
// no destination overlaps another chunk's destination or source, and the enums are valid;
// InvalidArgument naming the first fault found otherwise. O(n log n).
absl::Status ValidateCopyPlan(const CopyPlan& plan);

}  // namespace pulse
