#include "core/offload/offloaded_block_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace pulse {

absl::StatusOr<OffloadedBlockTable> OffloadedBlockTable::Create(
    BlockPool* device_pool, BlockPool* host_pool, int32_t block_tokens, int32_t max_tokens,
    int32_t device_peak, std::span<const int32_t> shared_host) {
  if (device_peak < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("an offloaded block table holding %d device blocks", device_peak));
  }
  PULSE_ASSIGN_OR_RETURN(
      BlockTable host, BlockTable::CreateSharing(host_pool, block_tokens, max_tokens, shared_host));
  if (absl::Status reserved = device_pool->Reserve(device_peak); !reserved.ok()) {
    return reserved;  // `host` gives its blocks and reservation back
  }
  OffloadedBlockTable table(device_pool, std::move(host), device_peak);
  table.device_.assign(shared_host.size(), -1);
  return table;
}

absl::StatusOr<OffloadedBlockTable> OffloadedBlockTable::FromResident(BlockTable& dense,
                                                                      BlockPool* device_pool,
                                                                      BlockPool* host_pool,
                                                                      int32_t device_peak) {
  const int32_t block_tokens = dense.block_tokens();
  if (device_peak < 0 || device_peak > BlocksForTokens(dense.max_tokens(), block_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("an offloaded sequence of %d tokens holding %d device blocks",
                        dense.max_tokens(), device_peak));
  }
  PULSE_ASSIGN_OR_RETURN(BlockTable host,
                         BlockTable::Create(host_pool, block_tokens, dense.max_tokens()));
  PULSE_RETURN_IF_ERROR(host.Grow(std::min(dense.capacity_tokens(), dense.max_tokens())));
  OffloadedBlockTable table(device_pool, std::move(host), 0);
  table.device_ = dense.Detach();
  table.resident_ = static_cast<int32_t>(table.device_.size());
  // The detached table gave back its worst case, which covers what the sequence may still need.
  const int32_t more = std::max(0, device_peak - table.resident_);
  PULSE_RETURN_IF_ERROR(device_pool->Reserve(more));
  table.device_reserved_ = more;
  return table;
}

absl::StatusOr<OffloadedBlockTable::Resident> OffloadedBlockTable::ToResident() {
  const int32_t block_tokens = host_.block_tokens();
  const int32_t worst = BlocksForTokens(host_.max_tokens(), block_tokens);
  // The worst case's blocks beyond those resident now.
  const int32_t needed = worst - resident_;
  if (needed > device_reserved_) {
    PULSE_RETURN_IF_ERROR(device_pool_->Reserve(needed - device_reserved_));
  } else {
    device_pool_->Unreserve(device_reserved_ - needed).IgnoreError();  // the table reserved them
  }
  device_reserved_ = needed;
  std::vector<int32_t> recall_host;
  std::vector<int32_t> recall_device;
  // Cannot fail: `needed` covers every block that is not resident.
  PULSE_RETURN_IF_ERROR(
      MakeResident(0, static_cast<int32_t>(device_.size()), recall_host, recall_device));
  PULSE_ASSIGN_OR_RETURN(BlockTable blocks,
                         BlockTable::Adopt(device_pool_, block_tokens, host_.max_tokens(),
                                           std::exchange(device_, {}), device_reserved_));
  resident_ = 0;
  device_reserved_ = 0;
  device_pool_ = nullptr;
  return Resident{std::move(blocks), std::move(recall_host), std::move(recall_device)};
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

absl::Status OffloadedBlockTable::GrowHost(int32_t tokens) {
  PULSE_RETURN_IF_ERROR(host_.Grow(tokens));
  device_.resize(host_.blocks().size(), -1);
  return absl::OkStatus();
}

absl::Status OffloadedBlockTable::MakeResident(int32_t begin, int32_t end,
                                               std::vector<int32_t>& recall_host,
                                               std::vector<int32_t>& recall_device) {
  begin = std::max(begin, 0);
  end = std::min<int32_t>(end, static_cast<int32_t>(device_.size()));
  int32_t missing = 0;
  for (int32_t j = begin; j < end; ++j) missing += device_[static_cast<size_t>(j)] < 0 ? 1 : 0;
  if (missing > device_reserved_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "an offloaded sequence has %d device blocks left for %d blocks to make resident",
        device_reserved_, missing));
  }
  for (int32_t j = begin; j < end; ++j) {
    int32_t& block = device_[static_cast<size_t>(j)];
    if (block >= 0) continue;
    // Cannot fail: the reservation covers it.
    PULSE_ASSIGN_OR_RETURN(block, device_pool_->Allocate());
    --device_reserved_;
    ++resident_;
    recall_host.push_back(host_.blocks()[static_cast<size_t>(j)]);
    recall_device.push_back(block);
  }
  return absl::OkStatus();
}

std::vector<WriteBackEntry> OffloadedBlockTable::Evict(int32_t begin, int32_t end) {
  std::vector<WriteBackEntry> evicted;
  for (int32_t j = std::max(begin, 0); j < std::min<int32_t>(end, device_.size()); ++j) {
    int32_t& block = device_[static_cast<size_t>(j)];
    if (block < 0) continue;
    evicted.push_back({block, host_.blocks()[static_cast<size_t>(j)]});
    // Cannot fail: the block is the pool's, allocated to this table, and freeing it makes the
    // one block the reservation takes back available.
    device_pool_->Free(block).IgnoreError();
    device_pool_->Reserve(1).IgnoreError();
    block = -1;
    --resident_;
    ++device_reserved_;
  }
  return evicted;
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
