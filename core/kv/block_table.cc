#include "core/kv/block_table.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace pulse {

int32_t BlocksForTokens(int64_t tokens, int32_t block_tokens) {
  return static_cast<int32_t>(tokens / block_tokens + (tokens % block_tokens != 0 ? 1 : 0));
}

absl::StatusOr<BlockTable> BlockTable::Create(BlockPool* pool, int32_t block_tokens,
                                              int32_t max_tokens) {
  return CreateSharing(pool, block_tokens, max_tokens, {});
}

absl::StatusOr<BlockTable> BlockTable::CreateSharing(BlockPool* pool, int32_t block_tokens,
                                                     int32_t max_tokens,
                                                     std::span<const int32_t> shared) {
  if (block_tokens <= 0 || max_tokens < 0 ||
      static_cast<int64_t>(shared.size()) > BlocksForTokens(max_tokens, block_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block table of %d tokens in blocks of %d tokens (%d of them shared)",
                        max_tokens, block_tokens, shared.size()));
  }
  BlockTable table(pool, block_tokens, max_tokens, 0);
  for (const int32_t block : shared) {
    // On failure the table frees what it shares so far.
    PULSE_RETURN_IF_ERROR(pool->Share(block));
    table.blocks_.push_back(block);
  }
  const int32_t rest =
      BlocksForTokens(max_tokens, block_tokens) - static_cast<int32_t>(shared.size());
  PULSE_RETURN_IF_ERROR(pool->Reserve(rest));
  table.reserved_ = rest;
  return table;
}

absl::StatusOr<BlockTable> BlockTable::Adopt(BlockPool* pool, int32_t block_tokens,
                                             int32_t max_tokens, std::vector<int32_t> blocks,
                                             int32_t reserved) {
  if (block_tokens <= 0 || max_tokens < 0 || reserved < 0 ||
      static_cast<int64_t>(blocks.size()) + reserved < BlocksForTokens(max_tokens, block_tokens)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "a block table of %d tokens in blocks of %d tokens over %d blocks and %d reserved",
        max_tokens, block_tokens, blocks.size(), reserved));
  }
  BlockTable table(pool, block_tokens, max_tokens, reserved);
  table.blocks_ = std::move(blocks);
  return table;
}

std::vector<int32_t> BlockTable::Detach() {
  std::vector<int32_t> blocks = std::exchange(blocks_, {});
  if (pool_ != nullptr) pool_->Unreserve(reserved_).IgnoreError();  // the pool gave it
  reserved_ = 0;
  pool_ = nullptr;
  return blocks;
}

BlockTable::BlockTable(BlockTable&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      block_tokens_(other.block_tokens_),
      max_tokens_(other.max_tokens_),
      reserved_(std::exchange(other.reserved_, 0)),
      blocks_(std::exchange(other.blocks_, {})) {}

BlockTable& BlockTable::operator=(BlockTable&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    block_tokens_ = other.block_tokens_;
    max_tokens_ = other.max_tokens_;
    reserved_ = std::exchange(other.reserved_, 0);
    blocks_ = std::exchange(other.blocks_, {});
  }
  return *this;
}

BlockTable::~BlockTable() { Release(); }

absl::Status BlockTable::Grow(int32_t tokens) {
  if (tokens > max_tokens_) {
    return absl::OutOfRangeError(absl::StrFormat(
        "a block table reserved for %d tokens cannot hold %d", max_tokens_, tokens));
  }
  while (capacity_tokens() < tokens) {
    PULSE_ASSIGN_OR_RETURN(const int32_t block, pool_->Allocate());
    --reserved_;
    blocks_.push_back(block);
  }
  return absl::OkStatus();
}

void BlockTable::Release() {
  if (pool_ == nullptr) return;
  // Cannot fail: the table holds only blocks and a reservation that the pool gave it.
  for (const int32_t block : blocks_) pool_->Free(block).IgnoreError();
  pool_->Unreserve(reserved_).IgnoreError();
  blocks_.clear();
  reserved_ = 0;
  pool_ = nullptr;
}

}  // namespace pulse
