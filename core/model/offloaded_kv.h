// The two-tier KV of offloaded sequences (DESIGN.md, "one decode step as data"): every full
// block of an offloaded sequence lives in the host tier (one AllocateHost buffer a layer of
// `host_blocks` blocks), and a decode step recalls the blocks it selects into the device tier's
// slots, blocks [first_slot, first_slot + slot_blocks) of each layer of the KvCache. One
// DeviceSlotCache a layer (solohead: whole blocks) or a layer and KV head (headwise: a head's key
// and value fragments) keeps recalled blocks resident across steps.
//
// A step, per layer: WriteBack the blocks the step filled (device -> host, after the compute that
// filled them); Resolve each selected candidate to the device block that holds it, which queues
// a recall for a miss; RecallQueued may enqueue the misses queued so far (selection calls it
// after each row, so one row's copy overlaps the next row's selection), and Recall enqueues the
// rest and makes the layer's attention wait for all of them. EndStep then waits for the write-backs
// (so a filled block's device copy may be freed) and ends the caches' step (so the slots read may
// be overwritten). Not thread-safe: the ModelRunner's step serializes it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/backend/backend.h"
#include "core/base/status.h"
#include "core/kv/block_selector.h"
#include "core/kv/device_slot_cache.h"
#include "core/kv/kv_cache.h"

namespace pulse {

enum class EvictionKind : uint8_t { kLru, kScoreAware };

struct OffloadOptions {
  int32_t host_blocks = 0;  // host-tier blocks a layer
  int32_t slot_blocks = 0;  // device-tier slots a layer
  // The recall granularity: whole blocks (solohead) or a KV head's fragments (headwise). Every
  // offloaded sequence selects in this mode.
  SelectionMode mode = SelectionMode::kSoloHead;
  EvictionKind eviction = EvictionKind::kLru;
  CopyExecutor executor = CopyExecutor::kAuto;
  // RecallQueued enqueues the misses queued so far once they reach this many bytes (a plan has a
  // fixed cost on the copy stream, so fewer wait for the next row's or the layer's end).
  size_t early_recall_bytes = size_t{1} << 20;
};

struct OffloadStats {
  int64_t recall_plans = 0;   // (step, layer) recalls that moved something
  int64_t early_recalls = 0;  // copy plans enqueued before their layer's selection ended
  int64_t recall_chunks = 0;  // contiguous pieces moved host -> device
  int64_t recall_bytes = 0;
  double recall_seconds = 0;     // the copy engine's time on the recall plans
  int64_t writeback_blocks = 0;  // (layer, block) written device -> host
  int64_t writeback_bytes = 0;
  CacheStats cache;  // over every layer and slot cache
};

// One full block to write back: a device block (of the dense pool) to a host-tier block.
struct BlockWriteBack {
  int32_t device_block = 0;
  int32_t host_block = 0;
};

class OffloadedKv {
 public:
  // InvalidArgument for capacities that are not positive, slots outside `cache`, or head
  // fragments the copy engine cannot move (headwise: a head's keys must be a multiple of 16
  // bytes); ResourceExhausted when the host tier cannot be allocated.
  static absl::StatusOr<std::unique_ptr<OffloadedKv>> Create(Backend& backend, const KvCache& cache,
                                                             int32_t first_slot,
                                                             const OffloadOptions& options);

  const OffloadOptions& options() const { return options_; }
  int32_t first_slot() const { return first_slot_; }
  // Slot caches a layer: 1 (solohead) or num_kv_heads (headwise).
  int32_t num_sets() const { return static_cast<int32_t>(caches_.front().size()); }
  // The host tier of `layer`: host_blocks blocks of the cache's layout.
  const void* host_layer(int32_t layer) const { return host_[static_cast<size_t>(layer)].data(); }

  // Enqueues the write-back of `blocks` in `layer`, after the compute enqueued so far.
  absl::Status WriteBack(int32_t layer, std::span<const BlockWriteBack> blocks);
  // The device block that holds host block `host_block` for set `set` of `layer` this step (a
  // slot; headwise: its fragments of KV head `set`), queueing its recall on a miss; `score` is
  // its selection score, for score-aware eviction. ResourceExhausted when every slot of the set
  // is taken by this step's selection; InvalidArgument for a block or set out of range.
  absl::StatusOr<int32_t> Resolve(int32_t layer, int32_t set, int32_t host_block, uint64_t key,
                                  float score);
  // Enqueues the misses Resolve queued for `layer` as one plan once they reach the options'
  // early_recall_bytes.
  absl::Status RecallQueued(int32_t layer);
  // Enqueues the misses still queued for `layer`; compute enqueued afterwards waits for every
  // plan of the layer this step.
  absl::Status Recall(int32_t layer);
  // Ends the step: waits for its write-backs, adds its recall time, frees the slots it read, and
  // forgets the blocks a failed step acquired slots for but never recalled.
  absl::Status EndStep();
  // Frees the slots of sequence `key`'s blocks (it ended; its host blocks may be reused).
  absl::Status Forget(uint64_t key);

  OffloadStats stats() const;
  // The slot caches' counts of sequence `key`, over every layer and set.
  CacheStats stats(uint64_t key) const;
  // Sequence `key`'s counts in one layer (over its KV heads' caches, head-wise); zeros for a
  // layer out of range.
  CacheStats layer_stats(uint64_t key, int32_t layer) const;

 private:
  struct LayerEvents {
    std::unique_ptr<CopyEvent> recall_start;
    std::unique_ptr<CopyEvent> recall_end;
    std::unique_ptr<CopyEvent> writeback;
    bool recalled = false;    // this step
    bool wrote_back = false;  // this step
  };

  OffloadedKv(Backend& backend, const KvCache& cache, int32_t first_slot,
              const OffloadOptions& options);
  // Appends to `chunks` the pieces of set `set` of a block: the whole block, or a head's keys and
  // values. Returns their bytes.
  size_t AddChunks(const char* src, char* dst, int32_t set, std::vector<CopyChunk>& chunks) const;
  // Enqueues recall_chunks_ (if any) as one plan, the layer's first after compute.
  absl::Status EnqueueRecall(int32_t layer);

  Backend& backend_;
  const PagedKvLayout layout_;
  std::vector<char*> device_;  // [layers]: the KvCache's layers
  const int32_t first_slot_;
  const OffloadOptions options_;
  std::vector<HostBuffer> host_;                      // [layers]
  std::vector<std::vector<DeviceSlotCache>> caches_;  // [layers][sets]
  std::vector<LayerEvents> events_;                   // [layers]
  std::vector<CopyChunk> recall_chunks_;              // the layer being resolved
  size_t recall_bytes_ = 0;                           // in recall_chunks_
  // (layer, set, host block) acquired by Resolve whose recall is not enqueued yet: forgotten at
  // EndStep when the step was abandoned, so no slot claims a block it never received.
  struct Pending {
    int32_t layer = 0;
    int32_t set = 0;
    int32_t host_block = 0;
  };
  std::vector<Pending> pending_;
  std::vector<CopyChunk> writeback_chunks_;
  OffloadStats stats_;
};

}  // namespace pulse
