// The device-driven sparse step's selection kernels: the top-k of each sparse row's candidate
// scores, the layer's block tables through the slot directory (hits, victims, the recall list),
// and forgetting a finished request's slots. reference/sparse_selection.cc says what each
// computes; the results are the same bit for bit (integer and comparison work only).
//
// Floors: these read a few KB a layer (scores: 4 bytes a candidate; picks and directory entries:
// 4-16 bytes a pick; a set's slot state when it has misses: 12 bytes a slot, once a radix pass),
// so each is a launch and a few block barriers: a few microseconds, 32 layers a step.
#include <climits>

#include "core/backend/cuda/block_select.cuh"
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/launch.cuh"
#include "core/backend/cuda/sparse_selection_kernels.h"
#include "cub/block/block_scan.cuh"

namespace pulse::cuda {
namespace {

constexpr int kTopThreads = 256;
constexpr int kTableThreads = 512;

// A segment of at most this many candidates has its keys staged in shared memory, read there by
// every pass; a longer one is read from global memory (L1 and L2) by each.
constexpr int32_t kStagedKeys = 4096;

__global__ void __launch_bounds__(kTopThreads)
    SelectTopBlocksKernel(const float* __restrict__ scores,
                          const ScoreSegment* __restrict__ segments, int32_t* __restrict__ picked) {
  WaitForPriorGrids();
  __shared__ BlockSelectScratch<kTopThreads> scratch;
  __shared__ uint32_t staged[kStagedKeys];
  const ScoreSegment segment = segments[blockIdx.x];
  const auto set = static_cast<int32_t>(blockIdx.y);
  if (set >= segment.num_sets) return;
  const float* set_scores = scores + segment.scores_first + int64_t{set} * segment.count;
  int32_t* out = picked + segment.picks_first + int64_t{set} * segment.picks;
  const auto emit = [&](int32_t position, int32_t i) { out[position] = i; };
  if (segment.count <= kStagedKeys) {
    for (int32_t i = threadIdx.x; i < segment.count; i += kTopThreads) {
      staged[i] = SelectionKey(set_scores[i]);
    }
    __syncthreads();
    BlockSelectSmallest<kTopThreads, uint32_t>(
        segment.count, segment.picks, [&](int32_t i) { return staged[i]; }, emit, scratch);
  } else {
    BlockSelectSmallest<kTopThreads, uint32_t>(
        segment.count, segment.picks, [&](int32_t i) { return SelectionKey(set_scores[i]); }, emit,
        scratch);
  }
}

__device__ __forceinline__ float StoredScore(float score) {
  return score != score ? -INFINITY : score;
}

// The row whose picks hold pair `pair` of a set: the last with picks_before <= pair.
__device__ int32_t RowOfPair(const SparseTableRow* rows, int32_t num_rows, int32_t pair) {
  int32_t low = 0;
  int32_t high = num_rows - 1;
  while (low < high) {
    const int32_t middle = (low + high + 1) / 2;
    if (rows[middle].picks_before <= pair) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

__device__ __forceinline__ unsigned long long* CounterOf(const SparseTableBuild& build, int32_t row,
                                                         SparseCounter counter) {
  return reinterpret_cast<unsigned long long*>(build.counters + int64_t{row} * kSparseCounters +
                                               counter);
}

// Adds to a row's counter the lanes of the warp that count it: one global atomic for the lanes
// that share a row (a warp's pairs are mostly one row's). Every lane of the warp calls it.
__device__ __forceinline__ void CountInWarp(const SparseTableBuild& build, bool counted,
                                            int32_t row, SparseCounter counter) {
  const unsigned peers = __match_any_sync(0xffffffffu, counted ? row : -1);
  if (counted && static_cast<int>(threadIdx.x % kWarp) == __ffs(peers) - 1) {
    atomicAdd(CounterOf(build, row, counter), static_cast<unsigned long long>(__popc(peers)));
  }
}

// The table build's two grids: the first resolves the picks, a thread a (pick, set), so that the
// chains of dependent loads a pick makes (its row, its candidate, the summary's stamp, the block's
// slot) run all at once rather than a block's width at a time; the second, a block a set of the
// directory, lists the misses in order and chooses their victims. Between them a pick block's
// misses wait in pick order, with their count.
constexpr int kResolveThreads = 256;
constexpr int kFixedRowsPerBlock = kResolveThreads / kWarp;  // a warp a row

struct PendingMisses {
  RecallEntry* entries = nullptr;  // [directory sets][pick_blocks * kResolveThreads]
  int32_t* counts = nullptr;       // [directory sets][pick_blocks]
  int32_t pick_blocks = 0;         // blocks enough for every row's table width in picks
};

// The blocks past the pick blocks fill the rows' fixed entries, a warp a row.
__global__ void __launch_bounds__(kResolveThreads)
    ResolvePicksKernel(SparseTableBuild build, PendingMisses pending) {
  WaitForPriorGrids();
  using Scan = cub::BlockScan<int32_t, kResolveThreads>;
  __shared__ typename Scan::TempStorage scan;
  const auto set = static_cast<int32_t>(blockIdx.y);
  const auto block = static_cast<int32_t>(blockIdx.x);
  const auto tid = static_cast<int32_t>(threadIdx.x);
  const int64_t stride = build.table_stride;
  if (block >= pending.pick_blocks) {
    const int32_t r = (block - pending.pick_blocks) * kFixedRowsPerBlock + tid / kWarp;
    if (r >= build.num_rows) return;
    const int lane = tid % kWarp;
    const SparseTableRow row = build.rows[r];
    const int32_t picks = build.segments[row.segment].picks;
    const int32_t table_row = r * build.num_sets + set;
    int32_t* table = build.tables + table_row * stride;
    const int32_t fixed = row.sink_blocks + row.window_blocks;
    for (int32_t i = lane; i < fixed; i += kWarp) {
      table[i < row.sink_blocks ? i : i + picks] = build.fixed_blocks[row.fixed_first + i];
    }
    if (lane == 0) build.kv_lens[table_row] = row.kv_len;
    return;
  }
  const SlotDirectoryView& directory = build.directory;
  const bool listed = set < directory.num_sets;
  const SparseTableRow& last = build.rows[build.num_rows - 1];
  const int32_t pairs = last.picks_before + build.segments[last.segment].picks;
  if (block * kResolveThreads >= pairs) {  // the whole block
    if (listed && tid == 0) pending.counts[int64_t{set} * pending.pick_blocks + block] = 0;
    return;
  }
  const int32_t step = *build.step;
  const int32_t pair = block * kResolveThreads + tid;
  int32_t missed = 0;
  bool reused = false;
  bool hit = false;
  int32_t r = 0;
  RecallEntry miss{};
  if (pair < pairs) {
    r = RowOfPair(build.rows, build.num_rows, pair);
    const SparseTableRow row = build.rows[r];
    const ScoreSegment segment = build.segments[row.segment];
    const int32_t j = pair - row.picks_before;
    const int32_t pick = build.picked[segment.picks_first + int64_t{set} * segment.picks + j];
    const int32_t candidate = segment.first + pick;
    int32_t& stamp =
        build.pick_stamps[int64_t{set} * build.num_summaries + build.summary_ids[candidate]];
    reused = stamp == step - 1;
    stamp = step;
    const int32_t host_block = build.candidate_blocks[candidate];
    const int64_t entry = (int64_t{r} * build.num_sets + set) * stride + row.sink_blocks + j;
    if (row.offloaded == 0 || !listed) {
      build.tables[entry] = host_block;
    } else {
      const float score = build.scores[segment.scores_first + int64_t{set} * segment.count + pick];
      const int32_t slot =
          directory.slot_of_block[int64_t{set} * directory.num_blocks + host_block];
      if (slot >= 0) {
        const int64_t at = int64_t{set} * directory.num_slots + slot;
        directory.last_used[at] = step;
        directory.score[at] = StoredScore(score);
        build.tables[entry] = directory.first_slot + slot;
        hit = true;
      } else {
        // Slot 0 until a victim is found (the table never names a block outside the cache).
        build.tables[entry] = directory.first_slot;
        missed = 1;
        miss = {host_block, -1, static_cast<int32_t>(entry), score};
      }
    }
  }
  CountInWarp(build, reused, r, kSparseReused);
  CountInWarp(build, hit, r, kSparseHits);
  if (!listed) return;  // the whole block
  int32_t position = 0;
  int32_t total = 0;
  Scan(scan).ExclusiveSum(missed, position, total);
  const int64_t first = int64_t{set} * pending.pick_blocks + block;
  if (missed != 0) pending.entries[first * kResolveThreads + position] = miss;
  if (tid == 0) pending.counts[first] = total;
}

struct FinishShared {
  BlockSelectScratch<kTableThreads> select;
  typename cub::BlockScan<int32_t, kTableThreads>::TempStorage scan;
  int32_t block_counts[kTableThreads];
  int32_t block_offsets[kTableThreads];
  int32_t evictable;
  int32_t free;  // of the evictable slots, those holding no block
};

// A block a set of the directory: the pick blocks' misses listed in order (a warp a pick block),
// then their victims.
__global__ void __launch_bounds__(kTableThreads)
    FinishTablesKernel(SparseTableBuild build, PendingMisses pending) {
  WaitForPriorGrids();
  __shared__ FinishShared shared;
  using Scan = cub::BlockScan<int32_t, kTableThreads>;
  const auto set = static_cast<int32_t>(blockIdx.x);
  const auto tid = static_cast<int32_t>(threadIdx.x);
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  const SlotDirectoryView& directory = build.directory;
  const int32_t step = *build.step;
  const int64_t stride = build.table_stride;
  RecallEntry* recalls = build.recalls.entries + int64_t{set} * build.recalls.capacity;
  const int32_t* counts = pending.counts + int64_t{set} * pending.pick_blocks;
  int32_t misses = 0;
  for (int32_t base = 0; base < pending.pick_blocks; base += kTableThreads) {
    const int32_t b = base + tid;
    const int32_t count = b < pending.pick_blocks ? counts[b] : 0;
    int32_t offset = 0;
    int32_t total = 0;
    Scan(shared.scan).ExclusiveSum(count, offset, total);
    shared.block_counts[tid] = count;
    shared.block_offsets[tid] = misses + offset;
    __syncthreads();
    const int32_t chunk = min(kTableThreads, pending.pick_blocks - base);
    for (int32_t c = warp; c < chunk; c += kTableThreads / kWarp) {
      const RecallEntry* from =
          pending.entries + (int64_t{set} * pending.pick_blocks + base + c) * kResolveThreads;
      const int32_t at = shared.block_offsets[c];
      for (int32_t i = lane; i < shared.block_counts[c] && at + i < build.recalls.capacity;
           i += kWarp) {
        recalls[at + i] = from[i];
      }
    }
    misses += total;
    __syncthreads();
  }
  if (misses == 0) {
    if (tid == 0) build.recalls.counts[set] = 0;
    return;
  }
  // The slots the step has not used, and the misses' victims among them.
  if (tid == 0) {
    shared.evictable = 0;
    shared.free = 0;
  }
  __syncthreads();
  const int64_t set_slots = int64_t{set} * directory.num_slots;
  const auto free_slot = [&](int32_t slot) {
    return directory.last_used[set_slots + slot] < step &&
           directory.block_of_slot[set_slots + slot] < 0;
  };
  int32_t evictable = 0;
  int32_t free = 0;
  for (int32_t slot = tid; slot < directory.num_slots; slot += kTableThreads) {
    evictable += directory.last_used[set_slots + slot] < step ? 1 : 0;
    free += free_slot(slot) ? 1 : 0;
  }
  if (evictable != 0) atomicAdd(&shared.evictable, evictable);
  if (free != 0) atomicAdd(&shared.free, free);
  __syncthreads();
  const int32_t victims = min(min(misses, build.recalls.capacity), shared.evictable);
  if (shared.free >= victims) {
    // Free slots leave first (VictimKey 0), the lower slot first: the victims are the first free
    // slots, found in one sweep instead of a radix select over every slot's key.
    int32_t found = 0;  // the same in every thread (the scan's total)
    for (int32_t base = 0; base < directory.num_slots && found < victims; base += kTableThreads) {
      const int32_t slot = base + tid;
      const int32_t is_free = slot < directory.num_slots && free_slot(slot) ? 1 : 0;
      int32_t position = 0;
      int32_t total = 0;
      Scan(shared.scan).ExclusiveSum(is_free, position, total);
      __syncthreads();
      if (is_free != 0 && found + position < victims) recalls[found + position].slot = slot;
      found += total;
    }
    __syncthreads();
  } else {
    BlockSelectSmallest<kTableThreads, uint64_t>(
        directory.num_slots, victims,
        [&](int32_t slot) {
          return directory.last_used[set_slots + slot] < step ? VictimKey(directory, set, slot)
                                                              : ~uint64_t{0};
        },
        [&](int32_t position, int32_t slot) { recalls[position].slot = slot; }, shared.select);
  }
  for (int32_t base = 0; base < victims; base += kTableThreads) {
    const int32_t i = base + tid;
    bool evicted_one = false;
    int32_t row = 0;
    if (i < victims) {
      RecallEntry& miss = recalls[i];
      row = static_cast<int32_t>(miss.table_index / stride / build.num_sets);
      const int64_t at = int64_t{set} * directory.num_slots + miss.slot;
      if (const int32_t evicted = directory.block_of_slot[at]; evicted >= 0) {
        directory.slot_of_block[int64_t{set} * directory.num_blocks + evicted] = -1;
        evicted_one = true;
      }
      directory.slot_of_block[int64_t{set} * directory.num_blocks + miss.host_block] = miss.slot;
      directory.block_of_slot[at] = miss.host_block;
      directory.last_used[at] = step;
      directory.score[at] = StoredScore(miss.score);
      build.tables[miss.table_index] = directory.first_slot + miss.slot;
    }
    CountInWarp(build, evicted_one, row, kSparseEvictions);
    CountInWarp(build, i < victims, row, kSparseMisses);
  }
  if (tid == 0) build.recalls.counts[set] = victims;
  // The misses past the victims (an overflow, which the plan prevents) are the offloaded picks
  // whose blocks are still not resident.
  if (victims == misses) return;
  __syncthreads();
  const SparseTableRow& last = build.rows[build.num_rows - 1];
  const int32_t pairs = last.picks_before + build.segments[last.segment].picks;
  for (int32_t pair = tid; pair < pairs; pair += kTableThreads) {
    const int32_t r = RowOfPair(build.rows, build.num_rows, pair);
    const SparseTableRow row = build.rows[r];
    if (row.offloaded == 0) continue;
    const ScoreSegment segment = build.segments[row.segment];
    const int32_t pick =
        build.picked[segment.picks_first + int64_t{set} * segment.picks + pair - row.picks_before];
    const int32_t block = build.candidate_blocks[segment.first + pick];
    if (directory.slot_of_block[int64_t{set} * directory.num_blocks + block] < 0) {
      atomicAdd(CounterOf(build, r, kSparseOverflow), 1ull);
    }
  }
}

PendingMisses PendingLayout(const SparseTableBuild& build, void* scratch) {
  PendingMisses pending;
  pending.pick_blocks =
      static_cast<int32_t>(CeilDiv(int64_t{build.num_rows} * build.table_stride, kResolveThreads));
  const int64_t entries = int64_t{build.directory.num_sets} * pending.pick_blocks * kResolveThreads;
  pending.entries = static_cast<RecallEntry*>(scratch);
  pending.counts = reinterpret_cast<int32_t*>(pending.entries + entries);
  return pending;
}

__global__ void ForgetSlotsKernel(SlotDirectoryView directory, const int32_t* __restrict__ blocks,
                                  int32_t count) {
  WaitForPriorGrids();
  const int64_t task = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (task >= int64_t{count} * directory.num_sets) return;
  const auto set = static_cast<int32_t>(task / count);
  const int32_t block = blocks[task % count];
  if (block < 0 || block >= directory.num_blocks) return;
  int32_t& slot = directory.slot_of_block[int64_t{set} * directory.num_blocks + block];
  if (slot < 0) return;
  const int64_t at = int64_t{set} * directory.num_slots + slot;
  directory.block_of_slot[at] = -1;
  directory.last_used[at] = -1;
  directory.score[at] = 0.0f;
  slot = -1;
}

// AdoptFreeSlots, a block a (set, layer): the set's free slots in increasing order go to the
// entries in order (a block-wide scan a tile of slots), up to the last entry.
constexpr int kAdoptThreads = 512;
constexpr int kCopyThreads = 256;

__global__ void __launch_bounds__(kAdoptThreads)
    AdoptSlotsKernel(const SlotLayer* __restrict__ layers,
                     const WriteBackEntry* __restrict__ entries, int32_t count) {
  WaitForPriorGrids();
  using Scan = cub::BlockScan<int32_t, kAdoptThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t taken;
  const SlotDirectoryView directory = layers[blockIdx.y].directory;
  const auto set = static_cast<int32_t>(blockIdx.x);
  if (set >= directory.num_sets) return;
  if (threadIdx.x == 0) taken = 0;
  __syncthreads();
  for (int32_t tile = 0; tile < directory.num_slots; tile += kAdoptThreads) {
    const int32_t before = taken;  // the entries earlier tiles' free slots went to
    if (before >= count) break;    // uniform: every thread read `taken` after the barrier
    const int32_t slot = tile + static_cast<int32_t>(threadIdx.x);
    const int64_t at = int64_t{set} * directory.num_slots + slot;
    const int32_t free = slot < directory.num_slots && directory.block_of_slot[at] < 0 ? 1 : 0;
    int32_t rank = 0;
    int32_t total = 0;
    Scan(scan).ExclusiveSum(free, rank, total);
    if (free != 0 && before + rank < count) {
      const int32_t block = entries[before + rank].host_block;
      int32_t& slot_of_block = directory.slot_of_block[int64_t{set} * directory.num_blocks + block];
      if (slot_of_block < 0) {
        slot_of_block = slot;
        directory.block_of_slot[at] = block;
        directory.last_used[at] = 0;
        directory.score[at] = -INFINITY;
      }
    }
    __syncthreads();  // every thread has read `taken` and the scan's storage
    if (threadIdx.x == 0) taken = before + total;
    __syncthreads();
  }
}

// The entries' copies into their slots, a block a (entry, set, layer): 16-byte vectors of the
// whole block, or of the set's KV head's key and value fragments.
__global__ void __launch_bounds__(kCopyThreads)
    CopyAdoptedKernel(const SlotLayer* __restrict__ layers,
                      const WriteBackEntry* __restrict__ entries, int64_t block_bytes,
                      int64_t fragment_bytes, int64_t value_bytes) {
  WaitForPriorGrids();
  const SlotLayer layer = layers[blockIdx.z];
  const SlotDirectoryView& directory = layer.directory;
  const auto set = static_cast<int32_t>(blockIdx.y);
  if (set >= directory.num_sets) return;
  const WriteBackEntry entry = entries[blockIdx.x];
  const int32_t slot =
      directory.slot_of_block[int64_t{set} * directory.num_blocks + entry.host_block];
  if (slot < 0) return;
  const char* src = static_cast<const char*>(layer.blocks) + entry.device_block * block_bytes;
  char* dst = static_cast<char*>(layer.blocks) + (directory.first_slot + slot) * block_bytes;
  const bool whole = directory.num_sets == 1;
  const int64_t piece = whole ? block_bytes : fragment_bytes;
  for (int part = 0; part < (whole ? 1 : 2); ++part) {
    const int64_t offset = whole ? 0 : part * value_bytes + set * fragment_bytes;
    const auto* from = reinterpret_cast<const int4*>(src + offset);
    auto* to = reinterpret_cast<int4*>(dst + offset);
    for (int64_t i = threadIdx.x; i < piece / 16; i += kCopyThreads) to[i] = from[i];
  }
}

}  // namespace

cudaError_t LaunchSelectTopBlocks(const float* scores, const ScoreSegment* segments,
                                  int32_t num_segments, int32_t max_sets, int32_t* picked,
                                  cudaStream_t stream) {
  if (num_segments < 0 || max_sets < 1 || max_sets > 65535) return cudaErrorInvalidValue;
  if (num_segments == 0) return cudaSuccess;
  return LaunchKernel(SelectTopBlocksKernel,
                      dim3(static_cast<unsigned>(num_segments), static_cast<unsigned>(max_sets)),
                      kTopThreads, 0, stream, scores, segments, picked);
}

int64_t BuildSparseTablesScratchBytes(const SparseTableBuild& build) {
  const int64_t pick_blocks =
      CeilDiv(int64_t{build.num_rows} * build.table_stride, kResolveThreads);
  const int64_t sets = build.directory.num_sets;
  return sets * pick_blocks * (kResolveThreads * int64_t{sizeof(RecallEntry)} + sizeof(int32_t));
}

cudaError_t LaunchBuildSparseTables(const SparseTableBuild& build, void* scratch,
                                    cudaStream_t stream) {
  if (build.num_rows < 0 || build.num_sets < 1 || build.num_sets > 65535 ||
      build.table_stride < 0 ||
      (build.directory.num_sets != 0 && build.directory.num_sets != build.num_sets)) {
    return cudaErrorInvalidValue;
  }
  if (build.num_rows == 0) return cudaSuccess;
  const PendingMisses pending = PendingLayout(build, scratch);
  const int64_t blocks = pending.pick_blocks + CeilDiv(build.num_rows, kFixedRowsPerBlock);
  if (blocks > INT_MAX) return cudaErrorInvalidConfiguration;
  const cudaError_t resolved =
      LaunchKernel(ResolvePicksKernel,
                   dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(build.num_sets)),
                   kResolveThreads, 0, stream, build, pending);
  if (resolved != cudaSuccess || build.directory.num_sets == 0) return resolved;
  return LaunchKernel(FinishTablesKernel, dim3(static_cast<unsigned>(build.num_sets)),
                      kTableThreads, 0, stream, build, pending);
}

cudaError_t LaunchForgetSlots(const SlotDirectoryView& directory, const int32_t* blocks,
                              int32_t count, cudaStream_t stream) {
  if (count < 0) return cudaErrorInvalidValue;
  const int64_t tasks = int64_t{count} * directory.num_sets;
  if (tasks == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t grid = CeilDiv(tasks, kThreads);
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;
  return LaunchKernel(ForgetSlotsKernel, dim3(static_cast<unsigned>(grid)), kThreads, 0, stream,
                      directory, blocks, count);
}

cudaError_t LaunchAdoptFreeSlots(const SlotLayer* layers, int32_t num_layers, int32_t max_sets,
                                 int32_t max_slots, const WriteBackEntry* entries, int32_t count,
                                 const PagedKvLayout& layout, cudaStream_t stream) {
  const int64_t fragment_bytes =
      layout.head_elems() * static_cast<int64_t>(DTypeBytes(layout.type));
  if (num_layers < 0 || num_layers > 65535 || max_sets < 1 || max_sets > 65535 || max_slots < 0 ||
      count < 0 || fragment_bytes % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (num_layers == 0 || count == 0 || max_slots == 0) return cudaSuccess;
  const auto layers_dim = static_cast<unsigned>(num_layers);
  const auto sets_dim = static_cast<unsigned>(max_sets);
  const cudaError_t assigned = LaunchKernel(AdoptSlotsKernel, dim3(sets_dim, layers_dim),
                                            kAdoptThreads, 0, stream, layers, entries, count);
  if (assigned != cudaSuccess) return assigned;
  return LaunchKernel(CopyAdoptedKernel, dim3(static_cast<unsigned>(count), sets_dim, layers_dim),
                      kCopyThreads, 0, stream, layers, entries, layout.block_bytes(),
                      fragment_bytes,
                      layout.value_offset() * static_cast<int64_t>(DTypeBytes(layout.type)));
}

}  // namespace pulse::cuda
