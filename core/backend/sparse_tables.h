// What the device-driven sparse decode step reads and writes in device memory, on every backend
// (Backend::BuildSparseTables, EnqueueRecall, EnqueueWriteBack, ForgetSlots): the device tier's
// slot directory, a layer's sparse rows, the recall list the step builds, and where the host
// tier keeps each block. core/offload owns the memory; the backends run the ops over these views.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/backend/block_scores.h"
#include "core/backend/kv_codec.h"
#include "core/backend/paged_kv.h"

namespace pulse {

// One layer's device-tier directory: which host block sits in which device slot, for each
// selection set (1 for solohead; one a KV head for headwise, whose slots hold that head's keys
// and values of a block), and the step that last used each slot. Slot s of a set is block
// first_slot + s of the layer's KV cache (headwise: that head's fragments of it).
struct SlotDirectoryView {
  int32_t num_sets = 0;
  int32_t num_slots = 0;   // a set
  int32_t num_blocks = 0;  // host blocks
  int32_t first_slot = 0;
  // Victims by lowest latest selection score first, then least recently used (else LRU alone).
  int32_t score_aware = 0;
  int32_t* slot_of_block = nullptr;  // [num_sets][num_blocks]: its slot, or -1
  int32_t* block_of_slot = nullptr;  // [num_sets][num_slots]: its host block, or -1 when free
  // [num_sets][num_slots]: the step that last used it; -1 free, 0 adopted and not used since
  int32_t* last_used = nullptr;
  uint64_t* score = nullptr;  // [num_sets][num_slots]: StampedScore of its block's latest pick
};

// A slot's score as its directory keeps it: the step in the high half and the score's rank in the
// low half (~SelectionKey: higher for a higher score, NaN lowest). A block that several rows pick
// in one step keeps the best of their scores whatever order they run in (the largest word wins;
// the device takes it with atomicMax).
PULSE_HOST_DEVICE inline uint64_t StampedScore(int32_t step, float score) {
  return static_cast<uint64_t>(static_cast<uint32_t>(step)) << 32 | ~SelectionKey(score);
}

// A layer of the device tier as AdoptFreeSlots sees it: its directory and its KV cache, whose
// block first_slot + s is slot s.
struct SlotLayer {
  SlotDirectoryView directory;
  void* blocks = nullptr;
};

// One sparse decode row's block tables in a layer: row r's table for set k is table row
// r * num_sets + k, holding sink_blocks fixed blocks, then the set's picks (increasing candidate
// order), then window_blocks fixed blocks: kv_len tokens. A pick of a row that is not offloaded
// is the dense block its candidate names; of an offloaded row, the slot holding the host block
// its candidate names (a hit), or a victim slot the block is recalled into (a miss).
struct SparseTableRow {
  int32_t segment = 0;      // its ScoreSegment (candidates, scores and picks)
  int32_t fixed_first = 0;  // its fixed blocks: sink_blocks, then window_blocks
  int32_t sink_blocks = 0;
  int32_t window_blocks = 0;
  int32_t kv_len = 0;
  int32_t offloaded = 0;     // 1: candidate blocks are host blocks resolved through the directory
  int32_t picks_before = 0;  // the picks of the rows before it, in each set (the misses' order)
  int32_t reserved = 0;
};
static_assert(std::is_trivially_copyable_v<SparseTableRow> && sizeof(SparseTableRow) == 32);

// The order in which a set's evictable slots leave, the smallest key first (ties: the lower
// slot): free slots, then by the latest selection score when score-aware, then the step that
// last used them.
PULSE_HOST_DEVICE inline uint64_t VictimKey(const SlotDirectoryView& directory, int32_t set,
                                            int32_t slot) {
  const int64_t i = int64_t{set} * directory.num_slots + slot;
  if (directory.block_of_slot[i] < 0) return 0;
  const auto recency = static_cast<uint64_t>(static_cast<uint32_t>(directory.last_used[i] + 1));
  if (directory.score_aware == 0) return recency;
  return static_cast<uint64_t>(static_cast<uint32_t>(directory.score[i])) << 32 | recency;
}

// A miss: host block `host_block` recalled into slot `slot`, which the table entry at
// `table_index` names; `score` is the pick's.
struct RecallEntry {
  int32_t host_block = 0;
  int32_t slot = 0;
  int32_t table_index = 0;
  float score = 0.0f;
};

// The misses of a layer, set by set: entries[set * capacity + i] for i < counts[set], in the
// order of the rows and their picks, given the set's victims in increasing slot order. Misses
// beyond the capacity or the evictable slots are not listed (an overflow).
struct RecallList {
  RecallEntry* entries = nullptr;  // [num_sets][capacity]
  int32_t* counts = nullptr;       // [num_sets]
  int32_t capacity = 0;            // at least a set's slots
};

// What a step's sparse layers count on the device, a row each (int64 counters[row][counter]),
// read back with its tokens.
enum SparseCounter : int32_t {
  kSparseHits = 0,   // picks of offloaded rows found in a slot
  kSparseMisses,     // picks of offloaded rows recalled
  kSparseEvictions,  // blocks the row's misses displaced
  kSparseReused,     // picks that the same set picked in the step before (stamp step - 1)
  kSparseOverflow,   // misses beyond the evictable slots (a bug: the plan checks the capacity)
  kSparseCounters,
};

// Everything BuildSparseTables reads and writes. Arrays are backend memory.
struct SparseTableBuild {
  const ScoreSegment* segments = nullptr;
  const SparseTableRow* rows = nullptr;
  int32_t num_rows = 0;             // on the host: the launch shape
  int32_t num_sets = 1;             // of every row (sparse rows of a step share the selection mode)
  const int32_t* picked = nullptr;  // SelectTopBlocks' output
  const float* scores = nullptr;    // AggregateScores' output (score-aware eviction)
  const int32_t* candidate_blocks = nullptr;  // [bound column]: a dense block or a host block
  const int32_t* summary_ids = nullptr;       // [bound column]: the candidate's summary
  const int32_t* fixed_blocks = nullptr;
  const int32_t* step = nullptr;  // the step's stamp: > 0, greater than every stamp before
  // [num_sets][num_summaries]: the step that last picked each summary's block (the reuse count).
  int32_t* pick_stamps = nullptr;
  int32_t num_summaries = 0;
  SlotDirectoryView directory;  // num_sets == 0 when no row is offloaded
  int32_t* tables = nullptr;    // out: rows of table_stride ints
  int32_t table_stride = 0;
  int32_t* kv_lens = nullptr;   // out: one a table row
  RecallList recalls;           // out (when the directory has sets)
  int64_t* counters = nullptr;  // [num_rows][kSparseCounters], added to
};

// Where the host tier keeps a block: the tier is chunks of blocks_per_chunk blocks of every layer
// ([num_layers][blocks_per_chunk] blocks each), and block b of layer l lies at
// chunks[b / blocks_per_chunk] + (l * blocks_per_chunk + b % blocks_per_chunk) * block bytes.
// `chunks` is backend memory holding the chunks' addresses (host memory the backend's kernels
// and copies use directly: Backend::AllocateHost).
struct HostTierView {
  const uint64_t* chunks = nullptr;
  int32_t blocks_per_chunk = 0;
  int32_t num_blocks = 0;             // the blocks the allocated chunks hold
  HostCodec codec = HostCodec::kRaw;  // its blocks' form: HostBlockBytes(layout, codec) each
};

// Where the host tier keeps block `block` of `layer`, blocks of `block_bytes` (HostBlockBytes).
PULSE_HOST_DEVICE inline char* HostTierBlock(const HostTierView& host, int32_t layer,
                                             int64_t block_bytes, int32_t block) {
  const int64_t in_chunk = int64_t{layer} * host.blocks_per_chunk + block % host.blocks_per_chunk;
  return reinterpret_cast<char*>(host.chunks[block / host.blocks_per_chunk]) +
         in_chunk * block_bytes;
}

// A block that filled this step, written back once: device block -> host block.
struct WriteBackEntry {
  int32_t device_block = 0;
  int32_t host_block = 0;
};

}  // namespace pulse
