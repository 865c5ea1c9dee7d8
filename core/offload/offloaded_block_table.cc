#include "core/offload/offloaded_block_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace pulse {

absl::StatusOr<OffloadedBlockTable> OffloadedBlockTable::Create(BlockPool* device_pool,
                                                                BlockPool* host_pool,
                                                                int32_t block_tokens,
                                                                int32_t max_tokens,
                                                                int32_t device_peak) {
  if (device_peak < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("an offloaded block table holding %d device blocks", device_peak));
  }
  PULSE_ASSIGN_OR_RETURN(BlockTable host, BlockTable::Create(host_pool, block_tokens, max_tokens));
  if (absl::Status reserved = device_pool->Reserve(device_peak); !reserved.ok()) {
    return reserved;  // `host` gives its reservation back
  }
  return OffloadedBlockTable(device_pool, std::move(host), device_peak);
}

OffloadedBlockTable::OffloadedBlockTable(OffloadedBlockTable&& other) noexcept
    : device_pool_(std::exchange(other.device_pool_, nullptr)),
      host_(std::move(other.host_)),
      device_(std::exchange(other.device_, {})),
      resident_(std::exchange(other.resident_, 0)),
      device_reserved_(std::exchange(other.device_reserved_, 0)) {}

OffloadedBlockTable& OffloadedBlockTable::operator=(OffloadedBlockTable&& other) noexcept {
  if (this != &other) {
    Release();
    device_pool_ = std::exchange(other.device_pool_, nullptr);
    host_ = std::move(other.host_);
    device_ = std::exchange(other.device_, {});
    resident_ = std::exchange(other.resident_, 0);
    device_reserved_ = std::exchange(other.device_reserved_, 0);
  }
  return *this;
}

OffloadedBlockTable::~OffloadedBlockTable() { Release(); }

absl::Status OffloadedBlockTable::Grow(int32_t tokens) {
  if (tokens > host_.max_tokens()) return host_.Grow(tokens);  // OutOfRange, changing nothing
  const int64_t new_blocks =
      int64_t{BlocksForTokens(tokens, host_.block_tokens())} - static_cast<int64_t>(device_.size());
  if (new_blocks > device_reserved_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "an offloaded sequence holding %d resident blocks has %d device blocks left for %d new "
        "blocks",
        resident_, device_reserved_, new_blocks));
  }
  PULSE_RETURN_IF_ERROR(host_.Grow(tokens));
  while (device_.size() < host_.blocks().size()) {
    PULSE_ASSIGN_OR_RETURN(const int32_t block, device_pool_->Allocate());
    --device_reserved_;
    ++resident_;
    device_.push_back(block);
  }
  return absl::OkStatus();
}

void OffloadedBlockTable::Evict(int32_t begin, int32_t end) {
  for (int32_t j = std::max(begin, 0); j < std::min<int32_t>(end, device_.size()); ++j) {
    int32_t& block = device_[static_cast<size_t>(j)];
    if (block < 0) continue;
    // Cannot fail: the block is the pool's, allocated to this table, and freeing it makes the
    // one block the reservation takes back available.
    device_pool_->Free(block).IgnoreError();
    device_pool_->Reserve(1).IgnoreError();
    block = -1;
    --resident_;
    ++device_reserved_;
  }
}

void OffloadedBlockTable::LimitDevice(int32_t blocks) {
  const int32_t excess = std::min(device_held() - std::max(blocks, 0), device_reserved_);
  if (excess <= 0) return;
  device_pool_->Unreserve(excess).IgnoreError();  // cannot fail: the table reserved them
  device_reserved_ -= excess;
}

void OffloadedBlockTable::Release() {
  if (device_pool_ == nullptr) return;
  Evict(0, static_cast<int32_t>(device_.size()));
  device_pool_->Unreserve(device_reserved_).IgnoreError();
  device_reserved_ = 0;
  device_.clear();
  device_pool_ = nullptr;
}

}  // namespace pulse
