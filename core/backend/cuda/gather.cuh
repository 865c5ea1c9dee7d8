// What the copy engine's kernels (gather.cu, fp8_gather.cu) share: thread blocks of kThreads,
// each warp taking work items FirstWarp(), FirstWarp() + Warps(), ...
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/backend/cuda/device_math.cuh"
#include "core/backend/sparse_tables.h"

namespace pulse::cuda {

inline constexpr int kGatherThreads = 512;
inline constexpr int kGatherWarpsPerBlock = kGatherThreads / kWarp;

__device__ __forceinline__ int64_t FirstWarp() {
  return int64_t{blockIdx.x} * kGatherWarpsPerBlock + threadIdx.x / kWarp;
}
__device__ __forceinline__ int64_t Warps() { return int64_t{gridDim.x} * kGatherWarpsPerBlock; }

// Thread blocks for `items` warp-sized items, at most `blocks`.
inline unsigned GatherGrid(int64_t items, int32_t blocks) {
  return static_cast<unsigned>(
      std::min<int64_t>(blocks, (items + kGatherWarpsPerBlock - 1) / kGatherWarpsPerBlock));
}

// The entries of a recall list's first `num_sets` sets.
__device__ __forceinline__ int64_t ListEntries(const RecallList& list, int32_t num_sets) {
  int64_t entries = 0;
  for (int32_t set = 0; set < num_sets; ++set) entries += list.counts[set];
  return entries;
}

// Entry `index` of the list, counted over its sets in order, and its set.
struct ListedEntry {
  RecallEntry entry;
  int32_t set;
};
__device__ __forceinline__ ListedEntry ListEntry(const RecallList& list, int64_t index) {
  int32_t set = 0;
  while (index >= list.counts[set]) index -= list.counts[set++];
  return {list.entries[int64_t{set} * list.capacity + index], set};
}

}  // namespace pulse::cuda
