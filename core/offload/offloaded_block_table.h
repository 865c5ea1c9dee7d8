// One offloaded sequence's KV blocks in the two tiers: a host-tier block for every logical block
// (reserved for the worst case up front, as BlockTable does), and device blocks of the dense pool
// only for the logical blocks that must be resident. While the prompt is prefilled every block
// is resident (chunks attend densely), or none is (a staged prefill, GrowHost, whose resident
// set is made resident before the first decode step); from the first decode step on, only the
// attention-sink blocks, the recent window and the block being written are, so the sequence holds
// at most `resident_limit` device blocks however long it grows. The others live in the host tier,
// written back once when they filled, and are recalled into device slots when selected.
//
// Both pools must outlive the table. Move-only; gives everything back when destroyed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/backend/sparse_tables.h"
#include "core/base/status.h"
#include "core/kv/block_pool.h"
#include "core/kv/block_table.h"

namespace pulse {

class OffloadedBlockTable {
 public:
  // Reserves host blocks for `max_tokens` tokens and `device_peak` device blocks (the most the
  // sequence holds at once: its prompt's blocks, or resident_limit when that is more); with
  // `shared_host`, its first logical blocks are those host blocks (a cached prefix: blocks of
  // the host pool that other sequences hold or that it caches, BlockTable::CreateSharing), none
  // of them resident. ResourceExhausted, holding and reserving nothing, when either pool cannot.
  static absl::StatusOr<OffloadedBlockTable> Create(BlockPool* device_pool, BlockPool* host_pool,
                                                    int32_t block_tokens, int32_t max_tokens,
                                                    int32_t device_peak,
                                                    std::span<const int32_t> shared_host = {});

  // Offloads a resident sequence: the blocks of `dense` (allocated from `device_pool`) become
  // this table's resident blocks, host blocks are reserved for dense's max_tokens and allocated
  // for as many logical blocks, and the device blocks held at once from now on are at most
  // `device_peak` (<= dense's worst case, else InvalidArgument). `dense` is left empty on
  // success, untouched on failure (ResourceExhausted when the host pool cannot reserve). The
  // caller writes the full blocks to their host blocks before evicting any (KeepResidentSet).
  static absl::StatusOr<OffloadedBlockTable> FromResident(BlockTable& dense, BlockPool* device_pool,
                                                          BlockPool* host_pool,
                                                          int32_t device_peak);
  // The resident table of the sequence, and what the caller must copy into it: host block
  // recall_host[i] into device block recall_device[i], for every logical block that was not
  // resident.
  struct Resident {
    BlockTable blocks;
    std::vector<int32_t> recall_host;
    std::vector<int32_t> recall_device;
  };
  // Makes the sequence resident again: a device block for every logical block that is not, and
  // a reservation for its worst case. This table is left holding its host blocks only, to be
  // destroyed once the copies are enqueued. ResourceExhausted, changing nothing, when the device
  // pool cannot cover the worst case.
  absl::StatusOr<Resident> ToResident();

  OffloadedBlockTable(OffloadedBlockTable&& other) noexcept;
  OffloadedBlockTable& operator=(OffloadedBlockTable&& other) noexcept;
  OffloadedBlockTable(const OffloadedBlockTable&) = delete;
  OffloadedBlockTable& operator=(const OffloadedBlockTable&) = delete;
  ~OffloadedBlockTable();

  // Allocates a host block and a device block for every new logical block until `tokens`
  // tokens fit. OutOfRange beyond max_tokens, ResourceExhausted when the device reservation is
  // spent (the caller evicted too little).
  absl::Status Grow(int32_t tokens);
  // Allocates host blocks only, until `tokens` tokens fit: a prompt prefilled staged
  // (core/offload/staged_prefill.h) has no resident block. OutOfRange beyond max_tokens.
  absl::Status GrowHost(int32_t tokens);
  // Gives a device block, from the reservation, to every logical block in [begin, end) that is
  // not resident, and appends its host block to recall_host and the device block to
  // recall_device, for the caller to recall. ResourceExhausted, changing nothing, when the
  // reservation is short.
  absl::Status MakeResident(int32_t begin, int32_t end, std::vector<int32_t>& recall_host,
                            std::vector<int32_t>& recall_device);
  // Frees the device blocks of the logical blocks in [begin, end) that are resident (their
  // content must be in the host tier by now); their reservation stays with the table. Returns
  // them, each beside its host block.
  std::vector<WriteBackEntry> Evict(int32_t begin, int32_t end);
  // Gives the device reservation beyond `blocks` resident-or-reserved blocks back to the pool.
  void LimitDevice(int32_t blocks);

  // Device block of each logical block, -1 where it is not resident.
  std::span<const int32_t> device_blocks() const { return device_; }
  std::span<const int32_t> host_blocks() const { return host_.blocks(); }
  int32_t resident() const { return resident_; }
  // Device blocks resident or reserved.
  int32_t device_held() const { return resident_ + device_reserved_; }

 private:
  OffloadedBlockTable(BlockPool* device_pool, BlockTable host, int32_t device_reserved)
      : device_pool_(device_pool), host_(std::move(host)), device_reserved_(device_reserved) {}
  void Release();

  BlockPool* device_pool_ = nullptr;
  BlockTable host_;
  std::vector<int32_t> device_;
  int32_t resident_ = 0;
  int32_t device_reserved_ = 0;
};

}  // namespace pulse
