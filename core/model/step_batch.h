// The inputs of one forward step: the new tokens of every sequence in the batch, where they sit
// in each sequence, each sequence's KV blocks, and which rows' logits are wanted. Built on the
// host by the scheduler; the ModelRunner uploads it once per step.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/backend/sparse_tables.h"
#include "core/offload/selection.h"

namespace pulse {

// Which of a sequence's new tokens get logits.
enum class LogitRows : uint8_t { kNone, kLast, kAll };

// Sparse attention for a sequence's decode steps: in every layer its query attends only to the
// blocks the selector picks (core/offload/selection.h). `key` names the sequence from step to
// step (the engine's request id), for the block reuse statistic.
struct SparseSelection {
  SelectionOptions options;
  uint64_t key = 0;
};

class StepBatch {
 public:
  // Adds a sequence whose `tokens` take positions [start_position, start_position + size) after
  // the start_position tokens already in its KV cache. `blocks` are its physical KV blocks in
  // logical order and must cover every position through the last new one.
  // `logits` says which new tokens' logits are computed (rows in the order tokens were added):
  // none, the last (to sample the next token), or all (to score a text).
  //
  // An offloaded sequence (one with a sparse selection and `host_blocks`) has a host-tier block
  // for each logical block (host_blocks.size() == blocks.size()): each full block is written
  // back there once, in the step that fills it. Its device `blocks` may then be -1 for blocks
  // that are not resident (in the host tier only), except for the blocks its selection always
  // includes (sinks and window) and those the new tokens are written to; a step that attends
  // densely (a prompt chunk) needs every block resident. `departed` are the blocks its resident
  // set gave up before this step (SparseSequence::departed).
  void AddSequence(std::span<const int32_t> tokens, int32_t start_position,
                   std::span<const int32_t> blocks, LogitRows logits,
                   const std::optional<SparseSelection>& sparse = std::nullopt,
                   std::span<const int32_t> host_blocks = {},
                   std::span<const WriteBackEntry> departed = {});
  // Adds a prompt chunk of an offloaded sequence none of whose blocks is resident: logical block
  // j lives in host-tier block host_blocks[j] (which must cover every position through the last
  // new one), and the chunk attends to it through the offload layer's staging area
  // (core/offload/staged_prefill.h), where the staged chunks of a step share the blocks of the
  // host blocks they share. Staged chunks run in steps of their own.
  void AddStagedSequence(std::span<const int32_t> tokens, int32_t start_position,
                         std::span<const int32_t> host_blocks, LogitRows logits);
  void Clear();

  int32_t num_seqs() const { return static_cast<int32_t>(kv_lens_.size()); }
  int32_t num_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t num_logit_rows() const { return static_cast<int32_t>(logit_rows_.size()); }
  // The longest block list of any sequence: the row stride of the packed block table.
  int32_t max_blocks_per_seq() const { return max_blocks_per_seq_; }

  std::span<const int32_t> tokens() const { return tokens_; }
  std::span<const int32_t> positions() const { return positions_; }
  std::span<const int32_t> kv_lens() const { return kv_lens_; }      // [num_seqs]
  std::span<const int32_t> q_offsets() const { return q_offsets_; }  // [num_seqs + 1]
  std::span<const int32_t> logit_rows() const { return logit_rows_; }
  // Sequence s's blocks, and its host-tier blocks (empty when it is not offloaded).
  std::span<const int32_t> blocks(int32_t seq) const;
  std::span<const int32_t> host_blocks(int32_t seq) const;
  std::span<const WriteBackEntry> departed(int32_t seq) const;
  bool offloaded(int32_t seq) const { return !host_blocks(seq).empty(); }
  // Sequence s's sparse selection, if it has one (it applies when s has one new token).
  const std::optional<SparseSelection>& sparse(int32_t seq) const {
    return sparse_[static_cast<size_t>(seq)];
  }
  bool has_sparse() const { return has_sparse_; }
  bool staged(int32_t seq) const { return staged_[static_cast<size_t>(seq)]; }
  bool has_staged() const { return has_staged_; }

 private:
  std::vector<int32_t> tokens_;
  std::vector<int32_t> positions_;
  std::vector<int32_t> kv_lens_;
  std::vector<int32_t> q_offsets_ = {0};
  std::vector<int32_t> block_ids_;
  std::vector<int32_t> block_offsets_ = {0};  // sequence s: block_ids_[offsets[s], offsets[s+1])
  std::vector<int32_t> host_ids_;
  std::vector<int32_t> host_offsets_ = {0};
  std::vector<WriteBackEntry> departed_;
  std::vector<int32_t> departed_offsets_ = {0};
  std::vector<int32_t> logit_rows_;
  std::vector<std::optional<SparseSelection>> sparse_;  // [num_seqs]
  bool has_sparse_ = false;
  std::vector<bool> staged_;  // [num_seqs]
  bool has_staged_ = false;
  absl::flat_hash_map<int32_t, int32_t> staging_of_host_;  // the staged chunks' staging blocks
  int32_t max_blocks_per_seq_ = 0;
};

}  // namespace pulse
