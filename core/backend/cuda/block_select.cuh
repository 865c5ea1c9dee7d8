// Selection of the k smallest keys of a list by one thread block (radix select): the top-k of a
// sparse row's candidate scores, and the victims of a set's slots. CCCL 3.0 has no top-k; a
// segmented sort would order every key to keep a few. Each pass histograms one 8-bit digit of the
// keys that match the digits fixed so far, and a warp finds the digit that holds the k-th smallest
// key; the passes stop early once that digit's keys are exactly the ones still wanted (two passes
// for most float scores). Then one ordered sweep, a contiguous range a warp counted by ballots,
// emits the keys below the threshold and the first of those equal to it, in increasing index
// order. Work: (passes + 2) reads of each key and four block barriers a pass.
#pragma once

#include <cstdint>

#include "core/backend/cuda/device_math.cuh"

namespace pulse::cuda {

template <int kThreads>
struct BlockSelectScratch {
  uint32_t histogram[256];
  int32_t warp_less[kThreads / kWarp];
  int32_t warp_equal[kThreads / kWarp];
  uint32_t digit;
  int32_t remaining;
  int32_t settled;  // 1: every key matching the digits fixed so far is wanted
};

// Calls emit(position, index) for the k smallest pairs (key_of(index), index), index < n,
// position 0..k-1 in increasing index order (a key ties go to the lower index). Every thread of
// the block calls it with the same n and k; key_of must give the same key for an index on every
// call. Returns after a block barrier.
template <int kThreads, typename Key, typename KeyOf, typename Emit>
__device__ void BlockSelectSmallest(int32_t n, int32_t k, KeyOf key_of, Emit emit,
                                    BlockSelectScratch<kThreads>& scratch) {
  static_assert(kThreads % kWarp == 0 && kThreads >= 256);
  constexpr int kWarps = kThreads / kWarp;
  const int32_t tid = static_cast<int32_t>(threadIdx.x);
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
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
            scratch.settled = rank - running == counts[u] ? 1 : 0;
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
    const bool settled = scratch.settled != 0;
    __syncthreads();  // the next pass clears the histogram
    if (settled) break;
  }
  // Every key whose digits so far are below `prefix`, and the first `remaining` equal to it
  // (all of them once settled). Warp w sweeps a contiguous range, first to count, then to emit:
  // a key's position is the keys below before it plus min(the equal ones before it, remaining).
  const int32_t span = static_cast<int32_t>(CeilDiv(CeilDiv(n, kWarps), kWarp)) * kWarp;
  const int32_t begin = min(n, warp * span);
  const int32_t end = min(n, begin + span);
  const auto classify = [&](int32_t i, bool& less, bool& equal) {
    less = false;
    equal = false;
    if (i < end) {
      const Key masked = key_of(i) & mask;
      less = masked < prefix;
      equal = masked == prefix;
    }
  };
  int32_t less_count = 0;
  int32_t equal_count = 0;
  for (int32_t base = begin; base < end; base += kWarp) {
    bool less = false;
    bool equal = false;
    classify(base + lane, less, equal);
    less_count += __popc(__ballot_sync(0xffffffffu, less));
    equal_count += __popc(__ballot_sync(0xffffffffu, equal));
  }
  if (lane == 0) {
    scratch.warp_less[warp] = less_count;
    scratch.warp_equal[warp] = equal_count;
  }
  __syncthreads();
  int32_t less_before = 0;
  int32_t equal_before = 0;
  for (int w = 0; w < warp; ++w) {
    less_before += scratch.warp_less[w];
    equal_before += scratch.warp_equal[w];
  }
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int32_t base = begin; base < end; base += kWarp) {
    bool less = false;
    bool equal = false;
    const int32_t i = base + lane;
    classify(i, less, equal);
    const unsigned less_bits = __ballot_sync(0xffffffffu, less);
    const unsigned equal_bits = __ballot_sync(0xffffffffu, equal);
    const int32_t equal_rank = equal_before + __popc(equal_bits & lanes_below);
    if (less || (equal && equal_rank < remaining)) {
      emit(less_before + __popc(less_bits & lanes_below) + min(equal_rank, remaining), i);
    }
    less_before += __popc(less_bits);
    equal_before += __popc(equal_bits);
  }
  __syncthreads();
}

}  // namespace pulse::cuda
