// One sequence's paged KV memory: its logical -> physical block map and the reservation that
// backs it. Created with a reservation for the sequence's worst case (Create fails when the pool
// cannot cover it); grows block by block as tokens append; gives every block and the unused
// reservation back to the pool when destroyed. Move-only; the pool must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/kv/block_pool.h"

namespace pulse {

// Blocks of `block_tokens` tokens needed to hold `tokens` tokens.
int32_t BlocksForTokens(int64_t tokens, int32_t block_tokens);

class BlockTable {
 public:
  // Reserves the blocks for up to `max_tokens` tokens. ResourceExhausted when the pool cannot.
  static absl::StatusOr<BlockTable> Create(BlockPool* pool, int32_t block_tokens,
                                           int32_t max_tokens);
  // Create, its first blocks `shared`: blocks of the pool that other tables hold or that the
  // pool caches (BlockPool::Share), which this one holds too from now on, and reserves the rest
  // of the worst case. ResourceExhausted (InvalidArgument for a block neither held nor cached, or
  // more blocks than max_tokens needs), holding and reserving nothing, when the pool cannot.
  static absl::StatusOr<BlockTable> CreateSharing(BlockPool* pool, int32_t block_tokens,
                                                  int32_t max_tokens,
                                                  std::span<const int32_t> shared);
  // A table over `blocks`, already allocated from `pool` and now owned by the table, and
  // `reserved` blocks the caller reserved in the pool for it: they must cover max_tokens
  // (FailedPrecondition, taking nothing, when they do not).
  static absl::StatusOr<BlockTable> Adopt(BlockPool* pool, int32_t block_tokens, int32_t max_tokens,
                                          std::vector<int32_t> blocks, int32_t reserved);

  BlockTable(BlockTable&& other) noexcept;
  BlockTable& operator=(BlockTable&& other) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;
  ~BlockTable();

  // Allocates blocks until `tokens` tokens fit. OutOfRange beyond the reserved max_tokens.
  absl::Status Grow(int32_t tokens);
  // Hands the allocated blocks to the caller, who owns them from now on (they stay allocated),
  // gives the rest of the reservation back, and leaves the table empty.
  std::vector<int32_t> Detach();

  std::span<const int32_t> blocks() const { return blocks_; }
  int32_t block_tokens() const { return block_tokens_; }
  int32_t max_tokens() const { return max_tokens_; }
  // Tokens the allocated blocks hold.
  int32_t capacity_tokens() const { return static_cast<int32_t>(blocks_.size()) * block_tokens_; }

 private:
  BlockTable(BlockPool* pool, int32_t block_tokens, int32_t max_tokens, int32_t reserved)
      : pool_(pool), block_tokens_(block_tokens), max_tokens_(max_tokens), reserved_(reserved) {}
  void Release();

  BlockPool* pool_ = nullptr;
  int32_t block_tokens_ = 0;
  int32_t max_tokens_ = 0;
  int32_t reserved_ = 0;  // reserved in the pool, not yet allocated
  std::vector<int32_t> blocks_;
};

}  // namespace pulse
