#include "core/offload/staged_prefill.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/kv/block_table.h"

namespace pulse {

int32_t StagedPrefill::Blocks(int32_t max_blocks_per_seq, int32_t max_step_tokens, int32_t max_seqs,
                              int32_t block_tokens) {
  return max_blocks_per_seq + BlocksForTokens(max_step_tokens, block_tokens) + max_seqs;
}

int64_t StagedPrefill::Bytes(const PagedKvLayout& layout, int32_t max_blocks) {
  return 2 * int64_t{max_blocks} * layout.block_bytes();
}

absl::StatusOr<std::unique_ptr<StagedPrefill>> StagedPrefill::Create(
    Backend& backend, const PagedKvLayout& layout, int32_t num_layers, int32_t max_blocks,
    HostTier& host, BlockSummaries& summaries) {
  if (num_layers < 1 || max_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a staging area of %d layers for prompts of %d blocks", num_layers, max_blocks));
  }
  auto staged = std::unique_ptr<StagedPrefill>(
      new StagedPrefill(backend, layout, num_layers, max_blocks, host, summaries));
  for (DeviceBuffer& half : staged->staging_) {
    PULSE_ASSIGN_OR_RETURN(half,
                           backend.Allocate(static_cast<size_t>(Bytes(layout, max_blocks) / 2)));
  }
  for (std::unique_ptr<CopyEvent>& event : staged->recalled_) {
    PULSE_ASSIGN_OR_RETURN(event, backend.CreateCopyEvent());
  }
  PULSE_ASSIGN_OR_RETURN(staged->written_, backend.CreateCopyEvent());
  // Write-back entries and the filled blocks' two id lists, for the longest prompt.
  PULSE_ASSIGN_OR_RETURN(staged->lists_,
                         backend.Allocate(static_cast<size_t>(4 * max_blocks) * sizeof(int32_t)));
  return staged;
}

absl::Status StagedPrefill::Plan(std::span<const StagedChunk> chunks) {
  const int32_t block_tokens = layout_.block_tokens;
  if (chunks.empty()) return absl::InvalidArgumentError("a staged step without chunks");
  // Per staging block: its host block, and the chunk that uses it (kShared: several).
  constexpr int32_t kShared = -2;
  std::vector<int32_t> host_of(static_cast<size_t>(max_blocks_), -1);
  std::vector<int32_t> user(static_cast<size_t>(max_blocks_), -1);
  std::vector<int32_t> writes;  // (staging block, host block) pairs
  std::vector<int32_t> filled_staging;
  std::vector<int32_t> filled_ids;
  int32_t highest = -1;
  recalls_.clear();
  for (size_t c = 0; c < chunks.size(); ++c) {
    const StagedChunk& chunk = chunks[c];
    const auto blocks = static_cast<int32_t>(chunk.host_blocks.size());
    if (chunk.computed < 0 || chunk.kv_len <= chunk.computed ||
        blocks != BlocksForTokens(chunk.kv_len, block_tokens) ||
        chunk.staging_blocks.size() != chunk.host_blocks.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a staged prompt chunk of tokens [%d, %d) in %d host blocks and %d staging blocks (%d "
          "tokens a block)",
          chunk.computed, chunk.kv_len, blocks, chunk.staging_blocks.size(), block_tokens));
    }
    const int32_t recalled = BlocksForTokens(chunk.computed, block_tokens);
    const int32_t first_written = chunk.computed / block_tokens;
    const int32_t full = chunk.kv_len / block_tokens;
    for (int32_t j = 0; j < blocks; ++j) {
      const int32_t host = chunk.host_blocks[static_cast<size_t>(j)];
      const int32_t staging = chunk.staging_blocks[static_cast<size_t>(j)];
      const auto at = static_cast<size_t>(staging);
      const bool first_use = staging >= 0 && staging < max_blocks_ && host_of[at] < 0;
      // A staging block names one host block, once a chunk.
      if (host < 0 || staging < 0 || staging >= max_blocks_ ||
          (!first_use && (host_of[at] != host || user[at] == static_cast<int32_t>(c)))) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "staged chunk %d: block %d in host block %d and staging block %d (the staging area "
            "holds %d; a staging block names one host block, once a chunk)",
            c, j, host, staging, max_blocks_));
      }
      host_of[at] = host;
      user[at] = first_use ? static_cast<int32_t>(c) : kShared;
      highest = std::max(highest, host);
      if (j < recalled && first_use) recalls_.emplace_back(staging, host);
      if (j < first_written) continue;
      writes.insert(writes.end(), {staging, host});
      if (j < full) {
        filled_staging.push_back(staging);
        filled_ids.push_back(summaries_.host_id(host));
      }
    }
  }
  for (size_t i = 0; i < writes.size(); i += 2) {
    if (user[static_cast<size_t>(writes[i])] == kShared) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "staged chunks: host block %d, which one writes, is used by another", writes[i + 1]));
    }
  }
  // The host tier grows to hold what the chunks write back (the engine grew it at admission).
  PULSE_RETURN_IF_ERROR(host_.Reserve(highest + 1));
  writebacks_ = static_cast<int32_t>(writes.size() / 2);
  filled_ = static_cast<int32_t>(filled_staging.size());
  writes.insert(writes.end(), filled_staging.begin(), filled_staging.end());
  writes.insert(writes.end(), filled_ids.begin(), filled_ids.end());
  backend_.CopyToDevice(lists_.data(), writes.data(), writes.size() * sizeof(int32_t));
  open_ = true;
  stats_.chunks += static_cast<int64_t>(chunks.size());
  return absl::OkStatus();
}

void* StagedPrefill::layer_blocks(int32_t layer) const {
  return staging_[static_cast<size_t>(layer % 2)].data();
}

absl::Status StagedPrefill::Recall(int32_t layer) {
  const int64_t block_bytes = layout_.block_bytes();
  auto* staging = static_cast<char*>(layer_blocks(layer));
  chunks_.clear();
  for (const auto& [block, host_block] : recalls_) {
    chunks_.push_back({host_.block(layer, host_block), staging + block * block_bytes,
                       static_cast<size_t>(block_bytes)});
  }
  // After compute: the layer two before, which used this half, must have read it.
  PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({.direction = CopyDirection::kHostToDevice,
                                              .chunks = chunks_,
                                              .after_compute = true,
                                              .codec = host_.codec(),
                                              .layout = layout_},
                                             *recalled_[static_cast<size_t>(layer % 2)]));
  stats_.recall_bytes += static_cast<int64_t>(recalls_.size()) * host_.block_bytes();
  return absl::OkStatus();
}

absl::Status StagedPrefill::BeforeAppend(int32_t layer) {
  if (!open_) return absl::FailedPreconditionError("a staged layer before its chunk's plan");
  if (layer == 0) PULSE_RETURN_IF_ERROR(Recall(0));
  if (layer + 1 < num_layers_) PULSE_RETURN_IF_ERROR(Recall(layer + 1));
  return backend_.WaitForCopy(*recalled_[static_cast<size_t>(layer % 2)]);
}

absl::Status StagedPrefill::AfterAppend(int32_t layer) {
  const auto* lists = lists_.as<const int32_t>();
  const int32_t* filled = lists + 2 * int64_t{writebacks_};
  summaries_.Summarize(layer, layer_blocks(layer), filled, filled + filled_, filled_);
  PULSE_RETURN_IF_ERROR(backend_.EnqueueWriteBack(reinterpret_cast<const WriteBackEntry*>(lists),
                                                  writebacks_, host_.view(), layer,
                                                  layer_blocks(layer), layout_, *written_));
  stats_.writeback_bytes += int64_t{writebacks_} * host_.block_bytes();
  stats_.filled_blocks += filled_;
  return absl::OkStatus();
}

absl::Status StagedPrefill::Finish() {
  open_ = false;
  return backend_.WaitForCopy(*written_);
}

void StagedPrefill::Abandon() {
  open_ = false;
  backend_.SynchronizeCopy(*written_).IgnoreError();
  for (const std::unique_ptr<CopyEvent>& event : recalled_) {
    backend_.SynchronizeCopy(*event).IgnoreError();
  }
}

}  // namespace pulse
