// Selection of the k smallest keys of a list by one thread block (radix select): the top-k of a
// sparse row's candidate scores, and the victims of a set's slots. CCCL 3.0 has no top-k; a
// segmented sort would order every key to keep a few. Here each pass histograms one 8-bit digit
// of the keys that match the digits fixed so far, a warp finds the digit that holds the k-th
// smallest key, and after the last pass one ordered sweep emits the keys below that threshold
// and the first of those equal to it, in increasing index order. Work: (bits / 8 + 1) reads of
// each key, a few block barriers a pass.
#pragma once

#include <cstdint>

#include "core/backend/cuda/device_math.cuh"
#include "cub/block/block_scan.cuh"

namespace pulse::cuda {

template <int kThreads>
struct BlockSelectScratch {
  typename cub::BlockScan<int32_t, kThreads>::TempStorage scan;
  uint32_t histogram[256];
  uint32_t digit;
  int32_t remaining;
};

// Calls emit(position, index) for the k smallest pairs (key_of(index), index), index < n,
// position 0..k-1 in increasing index order (a key ties go to the lower index). Every thread of
// the block calls it with the same n and k; key_of must give the same key for an index on every
// call. Returns after a block barrier.
template <int kThreads, typename Key, typename KeyOf, typename Emit>
__device__ void BlockSelectSmallest(int32_t n, int32_t k, KeyOf key_of, Emit emit,
                                    BlockSelectScratch<kThreads>& scratch) {
  static_assert(kThreads % kWarp == 0 && kThreads >= 256);
  const int32_t tid = static_cast<int32_t>(threadIdx.x);
  const int lane = tid % kWarp;
  if (k <= 0) {
    __syncthreads();
    return;
  }
  if (k >= n) {
    for (int32_t i = tid; i < n; i += kThreads) emit(i, i);
    __syncthreads();
    return;
  }
  Key prefix = 0;
  Key mask = 0;
  int32_t remaining = k;  // the rank, among the keys matching `prefix`, of the k-th smallest
  for (int shift = static_cast<int>(sizeof(Key)) * 8 - 8; shift >= 0; shift -= 8) {
    for (int32_t b = tid; b < 256; b += kThreads) scratch.histogram[b] = 0;
    __syncthreads();
    for (int32_t base = 0; base < n; base += kThreads) {
      const int32_t i = base + tid;
      uint32_t bin = 256;  // none
      if (i < n) {
        const Key key = key_of(i);
        if ((key & mask) == prefix) bin = static_cast<uint32_t>((key >> shift) & 255);
      }
      // One atomic for the lanes of a warp that share a bin (most do in the high digits).
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin < 256 && lane == __ffs(peers) - 1) {
        atomicAdd(&scratch.histogram[bin], static_cast<uint32_t>(__popc(peers)));
      }
    }
    __syncthreads();
    if (tid < kWarp) {
      // Lane l sums bins [8l, 8l + 8); a scan over lanes finds the one holding the rank.
      uint32_t counts[8];
      uint32_t sum = 0;
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        counts[u] = scratch.histogram[8 * lane + u];
        sum += counts[u];
      }
      uint32_t inclusive = sum;
#pragma unroll
      for (int offset = 1; offset < kWarp; offset *= 2) {
        const uint32_t other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
      }
      const uint32_t before = inclusive - sum;
      const auto rank = static_cast<uint32_t>(remaining);
      if (before < rank && rank <= inclusive) {
        uint32_t running = before;
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          if (rank <= running + counts[u]) {
            scratch.digit = static_cast<uint32_t>(8 * lane + u);
            scratch.remaining = static_cast<int32_t>(rank - running);
            break;
          }
          running += counts[u];
        }
      }
    }
    __syncthreads();
    prefix |= static_cast<Key>(scratch.digit) << shift;
    mask |= static_cast<Key>(255) << shift;
    remaining = scratch.remaining;
    __syncthreads();  // the next pass clears the histogram
  }
  // Every key below `prefix`, and the first `remaining` keys equal to it.
  using Scan = cub::BlockScan<int32_t, kThreads>;
  int32_t equal_before = 0;
  int32_t emitted_before = 0;
  for (int32_t base = 0; base < n; base += kThreads) {
    const int32_t i = base + tid;
    const Key key = i < n ? key_of(i) : Key{0};
    const int32_t equal = i < n && key == prefix ? 1 : 0;
    int32_t equal_rank = 0;
    int32_t equal_total = 0;
    Scan(scratch.scan).ExclusiveSum(equal, equal_rank, equal_total);
    __syncthreads();
    const int32_t chosen =
        i < n && (key < prefix || (equal != 0 && equal_before + equal_rank < remaining)) ? 1 : 0;
    int32_t position = 0;
    int32_t chosen_total = 0;
    Scan(scratch.scan).ExclusiveSum(chosen, position, chosen_total);
    __syncthreads();
    if (chosen != 0) emit(emitted_before + position, i);
    equal_before += equal_total;
    emitted_before += chosen_total;
  }
  __syncthreads();
}

}  // namespace pulse::cuda
