// An offloaded prompt prefilled without its KV resident: a chunk's attention reads the earlier
// chunks' KV one layer at a time from a staging area of two layers, recalled there from the host
// tier, and the chunk's own blocks go from the staging area to the host tier. The device then
// holds two layers of one prompt, not every layer of it, so a prompt longer than the dense pool
// can run offloaded (docs/design/admission.md, "Staged prefill"). Chunks of several prompts may
// run in one step: a host block they share (a cached prefix) has one staging block, recalled
// once a layer for all of them.
//
// Per layer l, on the backend's streams: the recall of layer l + 1's earlier blocks into the
// other half of the staging area is enqueued on the copy stream after the compute so far (the
// last compute that reads that half is layer l - 1's attention), so it runs beside layer l;
// compute waits for layer l's recall before its KV append; after the append the blocks the chunk
// filled are summarized and every block it wrote (a partial last one too, which the next chunk
// recalls) is written back on the copy stream. Copy stream order makes a recall into a half wait
// for the write-back out of it. Not thread-safe: the model runner serializes it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/backend/backend.h"
#include "core/base/status.h"
#include "core/offload/block_summaries.h"
#include "core/offload/host_tier.h"

namespace pulse {

// One prompt's chunk in a staged step: tokens [computed, kv_len) of a sequence whose logical
// block j lives in host block host_blocks[j] and is read and written as block staging_blocks[j]
// of the staging area (exactly the blocks of kv_len tokens each).
struct StagedChunk {
  std::span<const int32_t> host_blocks;
  std::span<const int32_t> staging_blocks;
  int32_t computed = 0;
  int32_t kv_len = 0;
};

// What staged chunks moved so far.
struct StagedPrefillStats {
  int64_t chunks = 0;
  int64_t filled_blocks = 0;    // (layer, block) blocks the chunks filled and summarized
  int64_t recall_bytes = 0;     // earlier blocks recalled host -> staging
  int64_t writeback_bytes = 0;  // blocks written staging -> host (a partial one again each chunk)
};

class StagedPrefill {
 public:
  // A staging area of `max_blocks` blocks of `layout` a layer (two layers of them), over `host`
  // and `summaries`, which must outlive it. ResourceExhausted when the backend cannot hold it.
  static absl::StatusOr<std::unique_ptr<StagedPrefill>> Create(Backend& backend,
                                                               const PagedKvLayout& layout,
                                                               int32_t num_layers,
                                                               int32_t max_blocks, HostTier& host,
                                                               BlockSummaries& summaries);

  // The staging blocks a layer of an engine whose sequences have up to `max_blocks_per_seq`
  // blocks: one whole prompt, and the blocks every other sequence of a step of `max_step_tokens`
  // tokens and `max_seqs` sequences writes (a partial block each at most besides).
  static int32_t Blocks(int32_t max_blocks_per_seq, int32_t max_step_tokens, int32_t max_seqs,
                        int32_t block_tokens);
  // Device bytes of a staging area of `max_blocks` blocks a layer.
  static int64_t Bytes(const PagedKvLayout& layout, int32_t max_blocks);

  // Plans a step of staged chunks; the host tier is grown to hold their blocks. A staging block
  // names one host block; one that a chunk writes belongs to that chunk alone. InvalidArgument
  // for chunks past the staging area, host blocks outside the tier or staging blocks shared
  // otherwise, ResourceExhausted when the tier cannot be pinned that far; nothing is enqueued.
  absl::Status Plan(std::span<const StagedChunk> chunks);
  // The layer's KV as the chunks' attention reads it.
  void* layer_blocks(int32_t layer) const;
  // Before the layer's KV append: enqueues the recall of the next layer's earlier blocks (and at
  // layer 0 of its own), and makes compute wait for this layer's.
  absl::Status BeforeAppend(int32_t layer);
  // After the layer's KV append: the summaries of the blocks the chunk filled, and the write-back
  // of every block it wrote.
  absl::Status AfterAppend(int32_t layer);
  // After the last layer: compute waits for the write-backs.
  absl::Status Finish();
  // A chunk that failed after Plan: waits for its copies.
  void Abandon();

  const StagedPrefillStats& stats() const { return stats_; }

 private:
  StagedPrefill(Backend& backend, const PagedKvLayout& layout, int32_t num_layers,
                int32_t max_blocks, HostTier& host, BlockSummaries& summaries)
      : backend_(backend),
        layout_(layout),
        num_layers_(num_layers),
        max_blocks_(max_blocks),
        host_(host),
        summaries_(summaries) {}
  absl::Status Recall(int32_t layer);

  Backend& backend_;
  const PagedKvLayout layout_;
  const int32_t num_layers_;
  const int32_t max_blocks_;
  HostTier& host_;
  BlockSummaries& summaries_;
  std::array<DeviceBuffer, 2> staging_;  // layer l reads and writes staging_[l % 2]
  // Uploaded by Plan: write-back entries (staging block -> host block), then the filled blocks'
  // staging ids and summary ids.
  DeviceBuffer lists_;
  std::array<std::unique_ptr<CopyEvent>, 2> recalled_;  // the last recall into each half
  std::unique_ptr<CopyEvent> written_;                  // the last write-back
  std::vector<std::pair<int32_t, int32_t>> recalls_;    // (staging block, host block) a layer
  std::vector<CopyChunk> chunks_;
  int32_t writebacks_ = 0;  // blocks the chunks wrote
  int32_t filled_ = 0;      // blocks they filled, summarized
  bool open_ = false;
  StagedPrefillStats stats_;
};

}  // namespace pulse
