#include "core/model/offloaded_kv.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace pulse {
namespace {

std::unique_ptr<EvictionPolicy> MakePolicy(EvictionKind kind) {
  if (kind == EvictionKind::kScoreAware) return std::make_unique<ScoreAwareEviction>();
  return std::make_unique<LruEviction>();
}

void Add(CacheStats& total, const CacheStats& more) {
  total.hits += more.hits;
  total.misses += more.misses;
  total.evictions += more.evictions;
}

}  // namespace

OffloadedKv::OffloadedKv(Backend& backend, const KvCache& cache, int32_t first_slot,
                         const OffloadOptions& options)
    : backend_(backend), layout_(cache.layout()), first_slot_(first_slot), options_(options) {
  for (int32_t layer = 0; layer < cache.num_layers(); ++layer) {
    device_.push_back(static_cast<char*>(cache.layer(layer)));
  }
}

absl::StatusOr<std::unique_ptr<OffloadedKv>> OffloadedKv::Create(Backend& backend,
                                                                 const KvCache& cache,
                                                                 int32_t first_slot,
                                                                 const OffloadOptions& options) {
  if (options.host_blocks <= 0 || options.slot_blocks <= 0 || first_slot < 0 ||
      int64_t{first_slot} + options.slot_blocks > cache.num_blocks()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "offloaded KV with %d host blocks and %d device slots from block %d of a cache of %d",
        options.host_blocks, options.slot_blocks, first_slot, cache.num_blocks()));
  }
  const PagedKvLayout& layout = cache.layout();
  const bool headwise = options.mode == SelectionMode::kHeadWise;
  const int64_t fragment_bytes =
      layout.head_elems() * static_cast<int64_t>(DTypeBytes(layout.type));
  if (headwise && fragment_bytes % static_cast<int64_t>(kCopyAlignment) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "head-wise offloading moves a head's keys of a block (%d bytes), which must be a multiple "
        "of %d bytes",
        fragment_bytes, kCopyAlignment));
  }
  auto offloaded =
      std::unique_ptr<OffloadedKv>(new OffloadedKv(backend, cache, first_slot, options));
  const int32_t sets = headwise ? layout.num_kv_heads : 1;
  const auto host_bytes = static_cast<size_t>(layout.block_bytes()) * options.host_blocks;
  for (int32_t layer = 0; layer < cache.num_layers(); ++layer) {
    absl::StatusOr<HostBuffer> host = backend.AllocateHost(host_bytes);
    if (!host.ok()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot allocate the host tier (%d layers x %d blocks of %d bytes): %s",
          cache.num_layers(), options.host_blocks, layout.block_bytes(), host.status().message()));
    }
    offloaded->host_.push_back(*std::move(host));
    std::vector<DeviceSlotCache> caches;
    for (int32_t set = 0; set < sets; ++set) {
      caches.emplace_back(options.slot_blocks, options.host_blocks, MakePolicy(options.eviction));
    }
    offloaded->caches_.push_back(std::move(caches));
    LayerEvents events;
    PULSE_ASSIGN_OR_RETURN(events.recall_start, backend.CreateCopyEvent());
    PULSE_ASSIGN_OR_RETURN(events.recall_end, backend.CreateCopyEvent());
    PULSE_ASSIGN_OR_RETURN(events.writeback, backend.CreateCopyEvent());
    offloaded->events_.push_back(std::move(events));
  }
  return offloaded;
}

size_t OffloadedKv::AddChunks(const char* src, char* dst, int32_t set,
                              std::vector<CopyChunk>& chunks) const {
  const auto element = static_cast<int64_t>(DTypeBytes(layout_.type));
  if (options_.mode == SelectionMode::kSoloHead) {
    chunks.push_back({src, dst, static_cast<size_t>(layout_.block_bytes())});
    return chunks.back().bytes;
  }
  const int64_t fragment = layout_.head_elems() * element;
  for (const int64_t offset : {set * fragment, layout_.value_offset() * element + set * fragment}) {
    chunks.push_back({src + offset, dst + offset, static_cast<size_t>(fragment)});
  }
  return 2 * static_cast<size_t>(fragment);
}

absl::Status OffloadedKv::WriteBack(int32_t layer, std::span<const BlockWriteBack> blocks) {
  if (blocks.empty()) return absl::OkStatus();
  const int64_t block_bytes = layout_.block_bytes();
  writeback_chunks_.clear();
  for (const BlockWriteBack& block : blocks) {
    if (block.host_block < 0 || block.host_block >= options_.host_blocks) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "write-back to host block %d of a tier of %d", block.host_block, options_.host_blocks));
    }
    writeback_chunks_.push_back(
        {device_[static_cast<size_t>(layer)] + block.device_block * block_bytes,
         host_[static_cast<size_t>(layer)].as<char>() + block.host_block * block_bytes,
         static_cast<size_t>(block_bytes)});
  }
  LayerEvents& events = events_[static_cast<size_t>(layer)];
  PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({.direction = CopyDirection::kDeviceToHost,
                                              .chunks = writeback_chunks_,
                                              .executor = options_.executor,
                                              .after_compute = true},
                                             *events.writeback));
  events.wrote_back = true;
  stats_.writeback_blocks += static_cast<int64_t>(blocks.size());
  stats_.writeback_bytes += static_cast<int64_t>(blocks.size()) * block_bytes;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> OffloadedKv::Resolve(int32_t layer, int32_t set, int32_t host_block,
                                             uint64_t key, float score) {
  if (set < 0 || set >= num_sets() || host_block < 0 || host_block >= options_.host_blocks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("recall of host block %d (of %d) for slot cache %d (of %d)", host_block,
                        options_.host_blocks, set, num_sets()));
  }
  DeviceSlotCache& cache = caches_[static_cast<size_t>(layer)][static_cast<size_t>(set)];
  std::optional<int32_t> slot = cache.Lookup(host_block, key);
  if (!slot.has_value()) {
    absl::StatusOr<SlotGrant> grant = cache.Acquire(host_block, key);
    if (!grant.ok()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the device tier of layer %d holds %d slots, all taken by this step's selection: %s",
          layer, cache.num_slots(), grant.status().message()));
    }
    slot = grant->slot;
    pending_.push_back({layer, set, host_block});
    const int64_t block_bytes = layout_.block_bytes();
    recall_bytes_ +=
        AddChunks(host_[static_cast<size_t>(layer)].as<char>() + host_block * block_bytes,
                  device_[static_cast<size_t>(layer)] + (first_slot_ + *slot) * block_bytes, set,
                  recall_chunks_);
  }
  cache.NoteScore(host_block, score);
  return first_slot_ + *slot;
}

absl::Status OffloadedKv::EnqueueRecall(int32_t layer) {
  if (recall_chunks_.empty()) return absl::OkStatus();
  LayerEvents& events = events_[static_cast<size_t>(layer)];
  if (!events.recalled) {
    // Recall may overwrite a slot an earlier step read: after compute, like write-back.
    PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({.direction = CopyDirection::kHostToDevice,
                                                .executor = options_.executor,
                                                .after_compute = true},
                                               *events.recall_start));
  }
  // The copy stream runs plans in order: recall_end, re-armed, stands for all of them.
  PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({.direction = CopyDirection::kHostToDevice,
                                              .chunks = recall_chunks_,
                                              .executor = options_.executor},
                                             *events.recall_end));
  events.recalled = true;
  stats_.recall_chunks += static_cast<int64_t>(recall_chunks_.size());
  stats_.recall_bytes += static_cast<int64_t>(recall_bytes_);
  recall_chunks_.clear();
  recall_bytes_ = 0;
  pending_.clear();
  return absl::OkStatus();
}

absl::Status OffloadedKv::RecallQueued(int32_t layer) {
  if (recall_chunks_.empty() || recall_bytes_ < options_.early_recall_bytes) {
    return absl::OkStatus();
  }
  PULSE_RETURN_IF_ERROR(EnqueueRecall(layer));
  ++stats_.early_recalls;
  return absl::OkStatus();
}

absl::Status OffloadedKv::Recall(int32_t layer) {
  PULSE_RETURN_IF_ERROR(EnqueueRecall(layer));
  const LayerEvents& events = events_[static_cast<size_t>(layer)];
  if (!events.recalled) return absl::OkStatus();
  ++stats_.recall_plans;
  return backend_.WaitForCopy(*events.recall_end);
}

absl::Status OffloadedKv::EndStep() {
  absl::Status status;
  for (size_t layer = 0; layer < events_.size(); ++layer) {
    LayerEvents& events = events_[layer];
    if (events.wrote_back) status.Update(backend_.SynchronizeCopy(*events.writeback));
    if (events.recalled) {
      status.Update(backend_.SynchronizeCopy(*events.recall_end));
      absl::StatusOr<double> seconds =
          backend_.CopySeconds(*events.recall_start, *events.recall_end);
      if (seconds.ok()) stats_.recall_seconds += *seconds;
      status.Update(seconds.status());
    }
    events.wrote_back = false;
    events.recalled = false;
    for (DeviceSlotCache& cache : caches_[layer]) cache.EndStep();
  }
  for (const Pending& block : pending_) {
    status.Update(caches_[static_cast<size_t>(block.layer)][static_cast<size_t>(block.set)].Forget(
        block.host_block));
  }
  pending_.clear();
  recall_chunks_.clear();
  recall_bytes_ = 0;
  return status;
}

absl::Status OffloadedKv::Forget(uint64_t key) {
  for (std::vector<DeviceSlotCache>& layer : caches_) {
    for (DeviceSlotCache& cache : layer) PULSE_RETURN_IF_ERROR(cache.ForgetRequest(key).status());
  }
  return absl::OkStatus();
}

OffloadStats OffloadedKv::stats() const {
  OffloadStats stats = stats_;
  for (const std::vector<DeviceSlotCache>& layer : caches_) {
    for (const DeviceSlotCache& cache : layer) Add(stats.cache, cache.stats());
  }
  return stats;
}

CacheStats OffloadedKv::stats(uint64_t key) const {
  CacheStats stats;
  for (int32_t layer = 0; layer < static_cast<int32_t>(caches_.size()); ++layer) {
    Add(stats, layer_stats(key, layer));
  }
  return stats;
}

CacheStats OffloadedKv::layer_stats(uint64_t key, int32_t layer) const {
  CacheStats stats;
  if (layer < 0 || layer >= static_cast<int32_t>(caches_.size())) return stats;
  for (const DeviceSlotCache& cache : caches_[static_cast<size_t>(layer)]) {
    Add(stats, cache.request_stats(key));
  }
  return stats;
}

}  // namespace pulse
