// The zero-copy gather (and scatter) kernel of the copy engine: warps copy pieces of a plan
// through 16-byte loads and stores, one side of which is mapped host memory, so a few SMs keep
// PCIe busy with many small transfers at once.

#include "core/backend/cuda/fp8_gather.h"
#include "core/backend/cuda/gather.cuh"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/sparse_selection_kernels.h"

namespace pulse::cuda {
namespace {

// Loads in flight per lane before the stores: 4 KiB per warp, which covers PCIe latency.
constexpr int kUnroll = 8;

// One warp copies `words` 16-byte words from src to dst.
__device__ __forceinline__ void CopyWords(const void* source, void* destination, uint32_t words,
                                          int lane) {
  const uint4* __restrict__ src = static_cast<const uint4*>(source);
  uint4* __restrict__ dst = static_cast<uint4*>(destination);
  uint32_t i = lane;
  for (; i + (kUnroll - 1) * kWarp < words; i += kUnroll * kWarp) {
    uint4 loaded[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) loaded[u] = src[i + u * kWarp];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * kWarp] = loaded[u];
  }
  for (; i < words; i += kWarp) dst[i] = src[i];
}

__global__ void __launch_bounds__(kGatherThreads)
    GatherKernel(const GatherPiece* __restrict__ pieces, int64_t count) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t p = FirstWarp(); p < count; p += Warps()) {
    const GatherPiece piece = pieces[p];
    CopyWords(piece.src, piece.dst, piece.words, lane);
  }
}

// How a list's entries split into pieces: `chunks` chunks of `chunk_bytes` an entry, each cut
// into pieces of at most kGatherPieceBytes.
struct EntryPieces {
  int64_t chunk_bytes;
  int32_t chunks;
  int32_t per_chunk;

  __device__ int64_t per_entry() const { return int64_t{chunks} * per_chunk; }
  // The byte offset and size, within its chunk, of piece `piece` of a chunk.
  __device__ uint32_t words(int32_t piece) const {
    return static_cast<uint32_t>(
               min(int64_t{kGatherPieceBytes}, chunk_bytes - int64_t{piece} * kGatherPieceBytes)) /
           16;
  }
};

EntryPieces SplitEntries(int64_t chunk_bytes, int32_t chunks) {
  return {chunk_bytes, chunks,
          static_cast<int32_t>(CeilDiv(chunk_bytes, int64_t{kGatherPieceBytes}))};
}

// A set's misses recalled as whole blocks (one set) or as its KV head's key and value fragments.
__global__ void __launch_bounds__(kGatherThreads)
    RecallListKernel(RecallList list, int32_t num_sets, HostTierView host, int32_t layer,
                     char* __restrict__ layer_blocks, int32_t first_slot, int64_t block_bytes,
                     int64_t values_bytes, EntryPieces split) {
  const int lane = threadIdx.x % kWarp;
  const int64_t entries = ListEntries(list, num_sets);
  for (int64_t p = FirstWarp(); p < entries * split.per_entry(); p += Warps()) {
    const auto [entry, set] = ListEntry(list, p / split.per_entry());
    const auto rest = static_cast<int32_t>(p % split.per_entry());
    const int32_t chunk = rest / split.per_chunk;
    const int32_t piece = rest % split.per_chunk;
    const int64_t offset = (num_sets == 1 ? 0 : chunk * values_bytes + set * split.chunk_bytes) +
                           int64_t{piece} * kGatherPieceBytes;
    CopyWords(HostTierBlock(host, layer, block_bytes, entry.host_block) + offset,
              layer_blocks + (first_slot + entry.slot) * block_bytes + offset, split.words(piece),
              lane);
  }
}

__global__ void __launch_bounds__(kGatherThreads)
    WriteBackListKernel(const WriteBackEntry* __restrict__ entries, int32_t count,
                        HostTierView host, int32_t layer, const char* __restrict__ layer_blocks,
                        int64_t block_bytes, EntryPieces split) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t p = FirstWarp(); p < count * split.per_entry(); p += Warps()) {
    const WriteBackEntry entry = entries[p / split.per_entry()];
    if (entry.device_block < 0) continue;
    const auto piece = static_cast<int32_t>(p % split.per_entry());
    const int64_t offset = int64_t{piece} * kGatherPieceBytes;
    CopyWords(layer_blocks + entry.device_block * block_bytes + offset,
              HostTierBlock(host, layer, block_bytes, entry.host_block) + offset,
              split.words(piece), lane);
  }
}

}  // namespace

cudaError_t LaunchGather(const GatherPiece* pieces, int64_t count, int32_t blocks,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  GatherKernel<<<GatherGrid(count, blocks), kGatherThreads, 0, stream>>>(pieces, count);
  return cudaGetLastError();
}

cudaError_t LaunchRecallList(const RecallList& list, int32_t num_sets, const HostTierView& host,
                             int32_t layer, void* layer_blocks, int32_t first_slot,
                             const PagedKvLayout& layout, int32_t blocks, cudaStream_t stream) {
  if (host.codec == HostCodec::kFp8E4m3) {
    return LaunchFp8RecallList(list, num_sets, host, layer, layer_blocks, first_slot, layout,
                               blocks, stream);
  }
  const auto element = static_cast<int64_t>(DTypeBytes(layout.type));
  const int64_t block_bytes = layout.block_bytes();
  const int64_t fragment_bytes = layout.head_elems() * element;
  if (num_sets < 1 || blocks < 1 || host.blocks_per_chunk < 1 || block_bytes % 16 != 0 ||
      (num_sets > 1 && fragment_bytes % 16 != 0)) {
    return cudaErrorInvalidValue;
  }
  const EntryPieces split =
      num_sets == 1 ? SplitEntries(block_bytes, 1) : SplitEntries(fragment_bytes, 2);
  RecallListKernel<<<static_cast<unsigned>(blocks), kGatherThreads, 0, stream>>>(
      list, num_sets, host, layer, static_cast<char*>(layer_blocks), first_slot, block_bytes,
      layout.value_offset() * element, split);
  return cudaGetLastError();
}

cudaError_t LaunchWriteBackList(const WriteBackEntry* entries, int32_t count,
                                const HostTierView& host, int32_t layer, const void* layer_blocks,
                                const PagedKvLayout& layout, int32_t blocks, cudaStream_t stream) {
  if (host.codec == HostCodec::kFp8E4m3) {
    return LaunchFp8WriteBackList(entries, count, host, layer, layer_blocks, layout, blocks,
                                  stream);
  }
  const int64_t block_bytes = layout.block_bytes();
  if (count < 0 || blocks < 1 || host.blocks_per_chunk < 1 || block_bytes % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  WriteBackListKernel<<<static_cast<unsigned>(blocks), kGatherThreads, 0, stream>>>(
      entries, count, host, layer, static_cast<const char*>(layer_blocks), block_bytes,
      SplitEntries(block_bytes, 1));
  return cudaGetLastError();
}

}  // namespace pulse::cuda
