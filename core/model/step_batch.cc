#include "core/model/step_batch.h"

#include <algorithm>

namespace pulse {

void StepBatch::AddSequence(std::span<const int32_t> tokens, int32_t start_position,
                            std::span<const int32_t> blocks, LogitRows logits,
                            const std::optional<SparseSelection>& sparse,
                            std::span<const int32_t> host_blocks,
                            std::span<const WriteBackEntry> departed) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (logits == LogitRows::kAll) logit_rows_.push_back(num_tokens());
    tokens_.push_back(tokens[i]);
    positions_.push_back(start_position + static_cast<int32_t>(i));
  }
  kv_lens_.push_back(start_position + static_cast<int32_t>(tokens.size()));
  q_offsets_.push_back(num_tokens());
  block_ids_.insert(block_ids_.end(), blocks.begin(), blocks.end());
  block_offsets_.push_back(static_cast<int32_t>(block_ids_.size()));
  host_ids_.insert(host_ids_.end(), host_blocks.begin(), host_blocks.end());
  host_offsets_.push_back(static_cast<int32_t>(host_ids_.size()));
  departed_.insert(departed_.end(), departed.begin(), departed.end());
  departed_offsets_.push_back(static_cast<int32_t>(departed_.size()));
  max_blocks_per_seq_ = std::max(max_blocks_per_seq_, static_cast<int32_t>(blocks.size()));
  if (logits == LogitRows::kLast && !tokens.empty()) logit_rows_.push_back(num_tokens() - 1);
  sparse_.push_back(sparse);
  has_sparse_ |= sparse.has_value();
  staged_.push_back(false);
}

void StepBatch::AddStagedSequence(std::span<const int32_t> tokens, int32_t start_position,
                                  std::span<const int32_t> host_blocks, LogitRows logits) {
  // Its attention reads logical block j from the staging block of host block host_blocks[j]:
  // the next free one when no staged sequence before it in the step has that host block.
  std::vector<int32_t> staging(host_blocks.size());
  for (size_t j = 0; j < staging.size(); ++j) {
    staging[j] =
        staging_of_host_.try_emplace(host_blocks[j], static_cast<int32_t>(staging_of_host_.size()))
            .first->second;
  }
  AddSequence(tokens, start_position, staging, logits, std::nullopt, host_blocks);
  staged_.back() = true;
  has_staged_ = true;
}

void StepBatch::Clear() {
  tokens_.clear();
  positions_.clear();
  kv_lens_.clear();
  q_offsets_.assign(1, 0);
  block_ids_.clear();
  block_offsets_.assign(1, 0);
  host_ids_.clear();
  host_offsets_.assign(1, 0);
  departed_.clear();
  departed_offsets_.assign(1, 0);
  logit_rows_.clear();
  sparse_.clear();
  has_sparse_ = false;
  staged_.clear();
  has_staged_ = false;
  staging_of_host_.clear();
  max_blocks_per_seq_ = 0;
}

std::span<const int32_t> StepBatch::blocks(int32_t seq) const {
  const auto begin = static_cast<size_t>(block_offsets_[static_cast<size_t>(seq)]);
  const auto end = static_cast<size_t>(block_offsets_[static_cast<size_t>(seq) + 1]);
  return std::span<const int32_t>(block_ids_).subspan(begin, end - begin);
}

std::span<const int32_t> StepBatch::host_blocks(int32_t seq) const {
  const auto begin = static_cast<size_t>(host_offsets_[static_cast<size_t>(seq)]);
  const auto end = static_cast<size_t>(host_offsets_[static_cast<size_t>(seq) + 1]);
  return std::span<const int32_t>(host_ids_).subspan(begin, end - begin);
}

std::span<const WriteBackEntry> StepBatch::departed(int32_t seq) const {
  const auto begin = static_cast<size_t>(departed_offsets_[static_cast<size_t>(seq)]);
  const auto end = static_cast<size_t>(departed_offsets_[static_cast<size_t>(seq) + 1]);
  return std::span<const WriteBackEntry>(departed_).subspan(begin, end - begin);
}

}  // namespace pulse
