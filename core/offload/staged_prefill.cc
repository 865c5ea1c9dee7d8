#include "core/offload/staged_prefill.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/kv/block_table.h"

namespace pulse {

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

absl::Status StagedPrefill::Plan(std::span<const int32_t> host_blocks, int32_t computed,
                                 int32_t kv_len) {
  const int32_t block_tokens = layout_.block_tokens;
  const auto blocks = static_cast<int32_t>(host_blocks.size());
  if (computed < 0 || kv_len <= computed || blocks != BlocksForTokens(kv_len, block_tokens) ||
      blocks > max_blocks_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a staged prompt chunk of tokens [%d, %d) in %d host blocks (%d tokens a block; the "
        "staging area holds %d blocks)",
        computed, kv_len, blocks, block_tokens, max_blocks_));
  }
  const int32_t lowest = *std::ranges::min_element(host_blocks);
  if (lowest < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a staged prompt chunk in host block %d", lowest));
  }
  // The host tier grows to hold what the chunk writes back (the engine grew it at admission).
  PULSE_RETURN_IF_ERROR(host_.Reserve(*std::ranges::max_element(host_blocks) + 1));
  host_blocks_.assign(host_blocks.begin(), host_blocks.end());
  recall_blocks_ = BlocksForTokens(computed, block_tokens);
  const int32_t first_written = computed / block_tokens;
  writebacks_ = blocks - first_written;
  filled_ = kv_len / block_tokens - first_written;
  std::vector<int32_t> lists;
  lists.reserve(static_cast<size_t>(2 * writebacks_ + 2 * filled_));
  for (int32_t j = first_written; j < blocks; ++j) {
    lists.push_back(j);
    lists.push_back(host_blocks_[static_cast<size_t>(j)]);
  }
  for (int32_t j = first_written; j < first_written + filled_; ++j) lists.push_back(j);
  for (int32_t j = first_written; j < first_written + filled_; ++j) {
    lists.push_back(summaries_.host_id(host_blocks_[static_cast<size_t>(j)]));
  }
  backend_.CopyToDevice(lists_.data(), lists.data(), lists.size() * sizeof(int32_t));
  open_ = true;
  ++stats_.chunks;
  return absl::OkStatus();
}

void* StagedPrefill::layer_blocks(int32_t layer) const {
  return staging_[static_cast<size_t>(layer % 2)].data();
}

absl::Status StagedPrefill::Recall(int32_t layer) {
  const int64_t block_bytes = layout_.block_bytes();
  auto* staging = static_cast<char*>(layer_blocks(layer));
  chunks_.clear();
  for (int32_t j = 0; j < recall_blocks_; ++j) {
    chunks_.push_back({host_.block(layer, host_blocks_[static_cast<size_t>(j)]),
                       staging + j * block_bytes, static_cast<size_t>(block_bytes)});
  }
  // After compute: the layer two before, which used this half, must have read it.
  PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({.direction = CopyDirection::kHostToDevice,
                                              .chunks = chunks_,
                                              .after_compute = true,
                                              .codec = host_.codec(),
                                              .layout = layout_},
                                             *recalled_[static_cast<size_t>(layer % 2)]));
  stats_.recall_bytes += int64_t{recall_blocks_} * host_.block_bytes();
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
