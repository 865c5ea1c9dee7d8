// The device-driven sparse step's selection kernels: the top-k of each sparse row's candidate
// scores, the layer's block tables through the slot directory (hits, victims, the recall list),
// and forgetting a finished request's slots. reference/sparse_selection.cc says what each
// computes; the results are the same bit for bit (integer and comparison work only).
//
// Floors: these read a few KB a layer (scores: 4 bytes a candidate; picks and directory entries:
// 4-16 bytes a pick; a set's slot state when it has misses: 12 bytes a slot, once a radix pass),
// so each is a launch and a few block barriers: a few microseconds, 32 layers a step.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/backend/cuda/block_select.cuh"
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/launch.cuh"
#include "core/backend/cuda/sparse_selection_kernels.h"
#include "cub/block/block_scan.cuh"

namespace pulse::cuda {
namespace {

constexpr int kTopThreads = 512;

// A segment of at most this many candidates has its keys staged in shared memory, read there by
// every pass; a longer one is read from global memory (L1 and L2) by each.
constexpr int32_t kStagedKeys = 8192;

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

// Rows picking one block in a step race to its slot's score: the largest stamped score wins.
__device__ __forceinline__ void KeepBestScore(const SlotDirectoryView& directory, int64_t at,
                                              uint64_t stamped) {
  atomicMax(reinterpret_cast<unsigned long long*>(directory.score + at),
            static_cast<unsigned long long>(stamped));
}

// The last i < n whose start(i) is at most `at` (0 when none), start nondecreasing: the range
// of a list of consecutive ranges that holds `at`.
template <typename Start>
__device__ int32_t RangeOf(int32_t n, int32_t at, Start start) {
  int32_t low = 0;
  int32_t high = n - 1;
  while (low < high) {
    const int32_t middle = (low + high + 1) / 2;
    if (start(middle) <= at) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

// The row whose picks hold pair `pair` of a set.
__device__ int32_t RowOfPair(const SparseTableRow* rows, int32_t num_rows, int32_t pair) {
  return RangeOf(num_rows, pair, [&](int32_t r) { return rows[r].picks_before; });
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

// The table build's two grids. The first resolves the picks, a thread a (pick, set), so that the
// chains of dependent loads a pick makes (its row, its candidate, the summary's stamp, the block's
// slot) run all at once rather than a block's width at a time; a pick block's misses wait in pick
// order in scratch, with their count, each having claimed its block (kClaimed). The second, when
// a set has misses, computes every slot's victim key, a block a chunk of slots, and keeps each
// chunk's smallest few evictable ones; the last chunk of a set to finish lists the misses, keeps
// those that lead their block, chooses their victims among those candidates, staged in shared
// memory, and gives the followers their leaders' slots. The candidates hold the victims unless a
// chunk that kept fewer keys than the victims and not all its evictable ones saw every kept key
// chosen: then, or when the candidates are too many to stage, the victims are chosen among all
// the keys. One block sweeping every slot from L2 was the step's largest cost, both when the
// device tier holds whole contexts of many requests and when it holds little more than the
// step's picks (then most slots are used, and the evictable ones are about the victims).
constexpr int kResolveThreads = 256;
constexpr int kFixedRowsPerBlock = kResolveThreads / kWarp;  // a warp a row
constexpr int kVictimThreads = 256;
constexpr int32_t kChunkSlots = 1024;
constexpr int32_t kStagedVictimKeys = 4096;

// A miss claims its block's directory entry with kClaimed + its table index (atomicMin: the
// first pick in table order, that is in row and pick order, leads; a later miss of the block
// follows it into the slot it gets). Below -1, so a claimed block reads as not resident; the
// claims left when the victims are chosen are cleared.
constexpr int32_t kClaimed = INT32_MIN;

// The evictable keys a chunk of a set keeps, of its `evictable`, when the set has `misses`
// (victims are at most the misses): twice a chunk's share of them and some, so that victims
// spread over the slots as least recently used ones do fall within what each chunk kept.
__device__ __forceinline__ int32_t KeptOfChunk(int32_t evictable, int32_t misses, int32_t chunks) {
  return min(evictable, min(misses, 2 * static_cast<int32_t>(CeilDiv(misses, chunks)) + 32));
}

struct TableScratch {
  RecallEntry* pending = nullptr;      // [directory sets][pick_blocks * kResolveThreads]
  RecallEntry* listed = nullptr;       // [directory sets][pick_blocks * kResolveThreads]
  int32_t* pending_counts = nullptr;   // [directory sets][pick_blocks]
  int32_t pick_blocks = 0;             // blocks enough for every row's table width in picks
  int32_t chunks = 0;                  // of kChunkSlots slots
  uint64_t* keys = nullptr;            // [directory sets][slots]: VictimKey, ~0 if used this step
  uint64_t* candidate_keys = nullptr;  // [directory sets][chunks][kChunkSlots], the kept first
  int32_t* candidate_slots = nullptr;  // the same
  int32_t* chunk_evictable = nullptr;  // [directory sets][chunks]
  uint32_t* chunks_done = nullptr;     // [directory sets], zeroed by the first grid
};

// The blocks past the pick blocks fill the rows' fixed entries, a warp a row.
__global__ void __launch_bounds__(kResolveThreads)
    ResolvePicksKernel(SparseTableBuild build, TableScratch scratch) {
  WaitForPriorGrids();
  using Scan = cub::BlockScan<int32_t, kResolveThreads>;
  __shared__ typename Scan::TempStorage scan;
  const auto set = static_cast<int32_t>(blockIdx.y);
  const auto block = static_cast<int32_t>(blockIdx.x);
  const auto tid = static_cast<int32_t>(threadIdx.x);
  const int64_t stride = build.table_stride;
  if (block == 0 && tid == 0 && set < build.directory.num_sets) scratch.chunks_done[set] = 0;
  if (block >= scratch.pick_blocks) {
    const int32_t r = (block - scratch.pick_blocks) * kFixedRowsPerBlock + tid / kWarp;
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
    if (listed && tid == 0) scratch.pending_counts[int64_t{set} * scratch.pick_blocks + block] = 0;
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
        KeepBestScore(directory, at, StampedScore(step, score));
        build.tables[entry] = directory.first_slot + slot;
        hit = true;
      } else {
        // Slot 0 until a victim is found (the table never names a block outside the cache).
        build.tables[entry] = directory.first_slot;
        missed = 1;
        miss = {host_block, -1, static_cast<int32_t>(entry), score};
        atomicMin(directory.slot_of_block + int64_t{set} * directory.num_blocks + host_block,
                  kClaimed + static_cast<int32_t>(entry));
      }
    }
  }
  CountInWarp(build, reused, r, kSparseReused);
  CountInWarp(build, hit, r, kSparseHits);
  if (!listed) return;  // the whole block
  int32_t position = 0;
  int32_t total = 0;
  Scan(scan).ExclusiveSum(missed, position, total);
  const int64_t first = int64_t{set} * scratch.pick_blocks + block;
  if (missed != 0) scratch.pending[first * kResolveThreads + position] = miss;
  if (tid == 0) scratch.pending_counts[first] = total;
}

struct FinishShared {
  BlockSelectScratch<kVictimThreads> select;
  typename cub::BlockScan<int32_t, kVictimThreads>::TempStorage scan;
  uint64_t staged[kStagedVictimKeys];
  int32_t block_counts[kVictimThreads];
  int32_t block_offsets[kVictimThreads];
  int32_t misses;
  int32_t evictable;
  int32_t last;
};

// Sums a value over the block into `total` (zeroed by the caller before a barrier); every thread
// reads the sum after the barrier this ends with.
__device__ __forceinline__ int32_t BlockSum(int32_t value, int32_t& total) {
  if (value != 0) atomicAdd(&total, value);
  __syncthreads();
  return total;
}

// The k smallest of n keys (ties: the lower index), from shared memory when they fit:
// emit(position, index) in increasing index order. The keys are other blocks' writes: read past L1.
template <typename Emit>
__device__ void SelectSmallestKeys(const uint64_t* keys, int32_t n, int32_t k, Emit emit,
                                   FinishShared& shared) {
  if (n <= kStagedVictimKeys) {
    for (int32_t i = threadIdx.x; i < n; i += kVictimThreads) shared.staged[i] = __ldcg(keys + i);
    __syncthreads();
    BlockSelectSmallest<kVictimThreads, uint64_t>(
        n, k, [&](int32_t i) { return shared.staged[i]; }, emit, shared.select);
  } else {
    BlockSelectSmallest<kVictimThreads, uint64_t>(
        n, k, [&](int32_t i) { return __ldcg(keys + i); }, emit, shared.select);
  }
}

// A block a (chunk of slots, set of the directory); nothing when the set has no misses.
__global__ void __launch_bounds__(kVictimThreads)
    FinishTablesKernel(SparseTableBuild build, TableScratch scratch) {
  WaitForPriorGrids();
  __shared__ FinishShared shared;
  using Scan = cub::BlockScan<int32_t, kVictimThreads>;
  const auto set = static_cast<int32_t>(blockIdx.y);
  const auto chunk = static_cast<int32_t>(blockIdx.x);
  const auto tid = static_cast<int32_t>(threadIdx.x);
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  const SlotDirectoryView& directory = build.directory;
  const int32_t step = *build.step;
  const int64_t stride = build.table_stride;
  RecallEntry* recalls = build.recalls.entries + int64_t{set} * build.recalls.capacity;
  const int32_t* pending_counts = scratch.pending_counts + int64_t{set} * scratch.pick_blocks;
  if (tid == 0) {
    shared.misses = 0;
    shared.evictable = 0;
  }
  __syncthreads();
  int32_t pending = 0;
  for (int32_t b = tid; b < scratch.pick_blocks; b += kVictimThreads) pending += pending_counts[b];
  const int32_t misses = BlockSum(pending, shared.misses);
  if (misses == 0) {
    if (chunk == 0 && tid == 0) build.recalls.counts[set] = 0;
    return;
  }

  // This chunk's keys, its evictable slots and its smallest keys.
  const int64_t set_slots = int64_t{set} * directory.num_slots;
  const int32_t chunk_first = chunk * kChunkSlots;
  const int32_t n = max(0, min(kChunkSlots, directory.num_slots - chunk_first));
  int32_t evictable = 0;
  for (int32_t i = tid; i < n; i += kVictimThreads) {
    const int32_t slot = chunk_first + i;
    const bool used = directory.last_used[set_slots + slot] >= step;
    const uint64_t key = used ? ~uint64_t{0} : VictimKey(directory, set, slot);
    shared.staged[i] = key;
    scratch.keys[set_slots + slot] = key;
    evictable += used ? 0 : 1;
  }
  const int64_t set_candidates = int64_t{set} * scratch.chunks * kChunkSlots;
  const int64_t candidates_first = set_candidates + int64_t{chunk} * kChunkSlots;
  const int32_t chunk_evictable = BlockSum(evictable, shared.evictable);
  const int32_t kept = KeptOfChunk(chunk_evictable, misses, scratch.chunks);
  BlockSelectSmallest<kVictimThreads, uint64_t>(
      n, kept, [&](int32_t i) { return shared.staged[i]; },
      [&](int32_t position, int32_t i) {
        scratch.candidate_keys[candidates_first + position] = shared.staged[i];
        scratch.candidate_slots[candidates_first + position] = chunk_first + i;
      },
      shared.select);
  if (tid == 0) scratch.chunk_evictable[int64_t{set} * scratch.chunks + chunk] = chunk_evictable;
  // The last chunk of the set to finish goes on.
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    shared.last =
        atomicAdd(scratch.chunks_done + set, 1u) == static_cast<uint32_t>(scratch.chunks - 1);
    shared.evictable = 0;
  }
  __syncthreads();
  if (shared.last == 0) return;
  __threadfence();

  // The misses, in pick order: a warp copies a pick block's.
  RecallEntry* misses_listed =
      scratch.listed + int64_t{set} * scratch.pick_blocks * kResolveThreads;
  int32_t* slot_of_block = directory.slot_of_block + int64_t{set} * directory.num_blocks;
  int32_t listed = 0;
  for (int32_t base = 0; base < scratch.pick_blocks; base += kVictimThreads) {
    const int32_t b = base + tid;
    const int32_t count = b < scratch.pick_blocks ? pending_counts[b] : 0;
    int32_t offset = 0;
    int32_t total = 0;
    Scan(shared.scan).ExclusiveSum(count, offset, total);
    shared.block_counts[tid] = count;
    shared.block_offsets[tid] = listed + offset;
    __syncthreads();
    const int32_t blocks = min(kVictimThreads, scratch.pick_blocks - base);
    for (int32_t c = warp; c < blocks; c += kVictimThreads / kWarp) {
      const RecallEntry* from =
          scratch.pending + (int64_t{set} * scratch.pick_blocks + base + c) * kResolveThreads;
      const int32_t at = shared.block_offsets[c];
      for (int32_t i = lane; i < shared.block_counts[c]; i += kWarp)
        misses_listed[at + i] = from[i];
    }
    listed += total;
    __syncthreads();
  }
  // The leaders go to the recall list in pick order; a follower counts as a hit.
  int32_t leaders = 0;
  for (int32_t base = 0; base < listed; base += kVictimThreads) {
    const int32_t i = base + tid;
    RecallEntry miss{};
    bool leader = false;
    int32_t row = 0;
    if (i < listed) {
      miss = misses_listed[i];
      leader = slot_of_block[miss.host_block] == kClaimed + miss.table_index;
      row = static_cast<int32_t>(miss.table_index / stride / build.num_sets);
    }
    CountInWarp(build, i < listed && !leader, row, kSparseHits);
    int32_t offset = 0;
    int32_t total = 0;
    Scan(shared.scan).ExclusiveSum(leader ? 1 : 0, offset, total);
    if (leader && leaders + offset < build.recalls.capacity) recalls[leaders + offset] = miss;
    leaders += total;
    __syncthreads();
  }
  int32_t all_evictable = 0;
  for (int32_t c = tid; c < scratch.chunks; c += kVictimThreads) {
    all_evictable += __ldcg(scratch.chunk_evictable + int64_t{set} * scratch.chunks + c);
  }
  const int32_t victims =
      min(min(leaders, build.recalls.capacity), BlockSum(all_evictable, shared.evictable));
  // The victims among the candidates, staged in slot order (chunk by chunk, each chunk's as it
  // kept them), counting how many each chunk gives. A chunk's evictable keys that it did not keep
  // are above those it kept, so one of them can be smaller than a victim only if every key it kept
  // is a victim: with fewer kept than victims, that is the case to choose again over all the keys.
  bool chosen = false;
  if (scratch.chunks <= kVictimThreads) {
    // Thread c speaks for chunk c.
    const int32_t evictable_c =
        tid < scratch.chunks ? __ldcg(scratch.chunk_evictable + int64_t{set} * scratch.chunks + tid)
                             : 0;
    const int32_t kept_c = KeptOfChunk(evictable_c, misses, scratch.chunks);
    int32_t offset = 0;
    int32_t staged = 0;
    Scan(shared.scan).ExclusiveSum(kept_c, offset, staged);
    shared.block_offsets[tid] = offset;
    shared.block_counts[tid] = 0;
    __syncthreads();
    if (staged <= kStagedVictimKeys) {
      for (int32_t c = warp; c < scratch.chunks; c += kVictimThreads / kWarp) {
        const int32_t at = shared.block_offsets[c];
        const int32_t count = (c + 1 < scratch.chunks ? shared.block_offsets[c + 1] : staged) - at;
        const uint64_t* keys = scratch.candidate_keys + set_candidates + int64_t{c} * kChunkSlots;
        for (int32_t j = lane; j < count; j += kWarp) shared.staged[at + j] = __ldcg(keys + j);
      }
      __syncthreads();
      BlockSelectSmallest<kVictimThreads, uint64_t>(
          staged, victims, [&](int32_t i) { return shared.staged[i]; },
          [&](int32_t position, int32_t i) {
            const int32_t c =
                RangeOf(scratch.chunks, i, [&](int32_t k) { return shared.block_offsets[k]; });
            recalls[position].slot = __ldcg(scratch.candidate_slots + set_candidates +
                                            int64_t{c} * kChunkSlots + i - shared.block_offsets[c]);
            atomicAdd(&shared.block_counts[c], 1);
          },
          shared.select);
      if (tid == 0) shared.evictable = 0;
      __syncthreads();
      const bool unsure =
          kept_c < evictable_c && kept_c < victims && shared.block_counts[tid] == kept_c;
      chosen = BlockSum(unsure ? 1 : 0, shared.evictable) == 0;
    }
  }
  if (!chosen) {
    SelectSmallestKeys(
        scratch.keys + set_slots, directory.num_slots, victims,
        [&](int32_t position, int32_t slot) { recalls[position].slot = slot; }, shared);
  }
  for (int32_t base = 0; base < victims; base += kVictimThreads) {
    const int32_t i = base + tid;
    bool evicted_one = false;
    int32_t row = 0;
    if (i < victims) {
      RecallEntry& miss = recalls[i];
      row = static_cast<int32_t>(miss.table_index / stride / build.num_sets);
      const int64_t at = set_slots + miss.slot;
      if (const int32_t evicted = directory.block_of_slot[at]; evicted >= 0) {
        slot_of_block[evicted] = -1;
        evicted_one = true;
      }
      slot_of_block[miss.host_block] = miss.slot;
      directory.block_of_slot[at] = miss.host_block;
      directory.last_used[at] = step;
      directory.score[at] = StampedScore(step, miss.score);
      build.tables[miss.table_index] = directory.first_slot + miss.slot;
    }
    CountInWarp(build, evicted_one, row, kSparseEvictions);
    CountInWarp(build, i < victims, row, kSparseMisses);
  }
  if (tid == 0) build.recalls.counts[set] = victims;
  __syncthreads();
  // Followers take their leader's slot and score; the claims of leaders without one are cleared.
  for (int32_t i = tid; i < listed; i += kVictimThreads) {
    const RecallEntry miss = misses_listed[i];
    const int32_t slot = slot_of_block[miss.host_block];
    if (slot >= 0) {
      build.tables[miss.table_index] = directory.first_slot + slot;
      KeepBestScore(directory, set_slots + slot, StampedScore(step, miss.score));
    } else {
      slot_of_block[miss.host_block] = -1;
    }
  }
  // The leaders past the victims (an overflow, which the plan prevents) and their followers are
  // the offloaded picks whose blocks are still not resident.
  if (victims == leaders) return;
  __syncthreads();
  const SparseTableRow& last = build.rows[build.num_rows - 1];
  const int32_t pairs = last.picks_before + build.segments[last.segment].picks;
  for (int32_t pair = tid; pair < pairs; pair += kVictimThreads) {
    const int32_t r = RowOfPair(build.rows, build.num_rows, pair);
    const SparseTableRow row = build.rows[r];
    if (row.offloaded == 0) continue;
    const ScoreSegment segment = build.segments[row.segment];
    const int32_t pick =
        build.picked[segment.picks_first + int64_t{set} * segment.picks + pair - row.picks_before];
    const int32_t block = build.candidate_blocks[segment.first + pick];
    if (slot_of_block[block] < 0) atomicAdd(CounterOf(build, r, kSparseOverflow), 1ull);
  }
}

// The scratch's arrays, one after another, each from a multiple of 8 bytes; `bytes`, their size.
TableScratch ScratchLayout(const SparseTableBuild& build, char* memory, int64_t& bytes) {
  TableScratch scratch;
  scratch.pick_blocks =
      static_cast<int32_t>(CeilDiv(int64_t{build.num_rows} * build.table_stride, kResolveThreads));
  scratch.chunks =
      static_cast<int32_t>(std::max<int64_t>(1, CeilDiv(build.directory.num_slots, kChunkSlots)));
  const int64_t sets = build.directory.num_sets;
  const int64_t pick_blocks = scratch.pick_blocks;
  const int64_t candidates = sets * scratch.chunks * kChunkSlots;
  bytes = 0;
  const auto take = [&](int64_t size) {
    const int64_t start = bytes;
    bytes += CeilDiv(size, 8) * 8;
    return memory == nullptr ? nullptr : memory + start;
  };
  scratch.pending = reinterpret_cast<RecallEntry*>(
      take(sets * pick_blocks * kResolveThreads * int64_t{sizeof(RecallEntry)}));
  scratch.listed = reinterpret_cast<RecallEntry*>(
      take(sets * pick_blocks * kResolveThreads * int64_t{sizeof(RecallEntry)}));
  scratch.keys = reinterpret_cast<uint64_t*>(take(sets * build.directory.num_slots * 8));
  scratch.candidate_keys = reinterpret_cast<uint64_t*>(take(candidates * 8));
  scratch.candidate_slots = reinterpret_cast<int32_t*>(take(candidates * 4));
  scratch.pending_counts = reinterpret_cast<int32_t*>(take(sets * pick_blocks * 4));
  scratch.chunk_evictable = reinterpret_cast<int32_t*>(take(sets * scratch.chunks * 4));
  scratch.chunks_done = reinterpret_cast<uint32_t*>(take(sets * 4));
  return scratch;
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
  directory.score[at] = 0;
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
        directory.score[at] = StampedScore(0, -INFINITY);
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
  int64_t bytes = 0;
  ScratchLayout(build, nullptr, bytes);
  return bytes;
}

cudaError_t LaunchBuildSparseTables(const SparseTableBuild& build, void* memory,
                                    cudaStream_t stream) {
  if (build.num_rows < 0 || build.num_sets < 1 || build.num_sets > 65535 ||
      build.table_stride < 0 || build.directory.num_slots < 0 ||
      (build.directory.num_sets != 0 && build.directory.num_sets != build.num_sets)) {
    return cudaErrorInvalidValue;
  }
  if (build.num_rows == 0) return cudaSuccess;
  int64_t bytes = 0;
  const TableScratch scratch = ScratchLayout(build, static_cast<char*>(memory), bytes);
  const int64_t blocks = scratch.pick_blocks + CeilDiv(build.num_rows, kFixedRowsPerBlock);
  if (blocks > INT_MAX) return cudaErrorInvalidConfiguration;
  const auto sets = static_cast<unsigned>(build.num_sets);
  const cudaError_t resolved =
      LaunchKernel(ResolvePicksKernel, dim3(static_cast<unsigned>(blocks), sets), kResolveThreads,
                   0, stream, build, scratch);
  if (resolved != cudaSuccess || build.directory.num_sets == 0) return resolved;
  return LaunchKernel(FinishTablesKernel, dim3(static_cast<unsigned>(scratch.chunks), sets),
                      kVictimThreads, 0, stream, build, scratch);
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
