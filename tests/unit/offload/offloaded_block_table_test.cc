// OffloadedBlockTable: host blocks for the worst case, device blocks only while resident, and
// the pools' accounting exact through any sequence of grow, evict and limit.
#include "core/offload/offloaded_block_table.h"

#include <algorithm>
#include <optional>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

TEST(OffloadedBlockTableTest, ReservesHostForTheWorstCaseAndDeviceForThePeak) {
  BlockPool device(10);
  BlockPool host(20);
  absl::StatusOr<OffloadedBlockTable> made = OffloadedBlockTable::Create(&device, &host, 4, 50, 6);
  ASSERT_TRUE(made.ok()) << made.status();
  std::optional<OffloadedBlockTable> table(*std::move(made));
  EXPECT_EQ(host.available(), 20 - 13);
  EXPECT_EQ(device.available(), 4);
  ASSERT_TRUE(table->Grow(21).ok());  // 6 blocks
  EXPECT_EQ(table->resident(), 6);
  EXPECT_EQ(table->device_held(), 6);
  EXPECT_EQ(table->host_blocks().size(), 6u);
  EXPECT_EQ(table->Grow(25).code(), absl::StatusCode::kResourceExhausted);

  table->Evict(1, 4);  // blocks 1, 2, 3 leave the device; their reservation stays
  EXPECT_EQ(table->resident(), 3);
  EXPECT_EQ(table->device_held(), 6);
  EXPECT_EQ(std::vector<int32_t>(table->device_blocks().begin(), table->device_blocks().end()),
            (std::vector<int32_t>{0, -1, -1, -1, 4, 5}));
  table->LimitDevice(4);
  EXPECT_EQ(table->device_held(), 4);
  EXPECT_EQ(device.available(), 6);
  ASSERT_TRUE(table->Grow(25).ok());            // block 6, from the one reserved block left
  EXPECT_EQ(table->device_blocks().back(), 3);  // the most recently freed block is reused
  EXPECT_EQ(table->Grow(29).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(table->Grow(53).code(), absl::StatusCode::kOutOfRange);

  table.reset();  // everything goes back
  EXPECT_EQ(device.available(), 10);
  EXPECT_EQ(host.available(), 20);
}

// A staged prompt: host blocks only while it is prefilled; then device blocks for the blocks made
// resident, from the reservation, each named beside its host block; a short reservation changes
// nothing.
TEST(OffloadedBlockTableTest, AStagedPromptHoldsNoDeviceBlockUntilItsSetIsMadeResident) {
  BlockPool device(10);
  BlockPool host(20);
  absl::StatusOr<OffloadedBlockTable> table = OffloadedBlockTable::Create(&device, &host, 4, 50, 4);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(table->GrowHost(30).ok());  // 8 blocks
  EXPECT_EQ(table->resident(), 0);
  EXPECT_EQ(table->host_blocks().size(), 8u);
  EXPECT_THAT(table->device_blocks(), ::testing::Each(-1));
  EXPECT_EQ(table->GrowHost(53).code(), absl::StatusCode::kOutOfRange);

  std::vector<int32_t> recall_host;
  std::vector<int32_t> recall_device;
  EXPECT_EQ(table->MakeResident(0, 8, recall_host, recall_device).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(table->resident(), 0);
  EXPECT_TRUE(recall_host.empty() && recall_device.empty());
  const absl::Status made = table->MakeResident(5, 20, recall_host, recall_device);
  ASSERT_TRUE(made.ok()) << made;
  ASSERT_EQ(recall_host.size(), 3u);
  ASSERT_EQ(recall_device.size(), 3u);
  for (size_t i = 0; i < recall_host.size(); ++i) {
    EXPECT_EQ(recall_device[i], table->device_blocks()[5 + i]);
    EXPECT_EQ(recall_host[i], table->host_blocks()[5 + i]);
  }
  ASSERT_TRUE(table->MakeResident(6, 8, recall_host, recall_device).ok());
  EXPECT_EQ(recall_host.size(), 3u);  // resident already
  EXPECT_EQ(table->resident(), 3);
  EXPECT_EQ(table->device_held(), 4);
  EXPECT_EQ(device.available(), 6);
}

TEST(OffloadedBlockTableTest, AFailedCreateReservesNothing) {
  BlockPool device(4);
  BlockPool host(8);
  EXPECT_EQ(OffloadedBlockTable::Create(&device, &host, 4, 100, 2).status().code(),
            absl::StatusCode::kResourceExhausted);  // host: 25 blocks
  EXPECT_EQ(OffloadedBlockTable::Create(&device, &host, 4, 20, 5).status().code(),
            absl::StatusCode::kResourceExhausted);  // device: 5 blocks
  EXPECT_EQ(device.available(), 4);
  EXPECT_EQ(host.available(), 8);
  EXPECT_EQ(OffloadedBlockTable::Create(&device, &host, 4, 20, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OffloadedBlockTableTest, MovedFromTablesGiveNothingBackTwice) {
  BlockPool device(8);
  BlockPool host(8);
  OffloadedBlockTable a = *OffloadedBlockTable::Create(&device, &host, 4, 16, 3);
  ASSERT_TRUE(a.Grow(8).ok());
  OffloadedBlockTable b = std::move(a);
  OffloadedBlockTable c = *OffloadedBlockTable::Create(&device, &host, 4, 8, 2);
  c = std::move(b);  // c's own blocks go back; b's move in
  EXPECT_EQ(device.available(), 5);
  EXPECT_EQ(host.available(), 4);
  EXPECT_EQ(c.resident(), 2);
}

// Random operations on several tables over two shared pools, checked against the pools'
// counts after every operation.
TEST(OffloadedBlockTableTest, RandomOperationsKeepThePoolsExact) {
  std::mt19937 random(5);
  for (int round = 0; round < 50; ++round) {
    BlockPool device(24);
    BlockPool host(64);
    std::vector<std::optional<OffloadedBlockTable>> tables(4);
    std::vector<int32_t> tokens(4, 0);
    for (int op = 0; op < 200; ++op) {
      const size_t t = random() % tables.size();
      std::optional<OffloadedBlockTable>& table = tables[t];
      const int kind = static_cast<int>(random() % 5);
      if (!table.has_value() || kind == 0) {
        table.reset();
        tokens[t] = 0;
        absl::StatusOr<OffloadedBlockTable> made =
            OffloadedBlockTable::Create(&device, &host, 4, 1 + static_cast<int32_t>(random() % 60),
                                        static_cast<int32_t>(random() % 8));
        if (made.ok()) table.emplace(*std::move(made));
      } else if (kind == 1 || kind == 2) {
        const int32_t want = tokens[t] + static_cast<int32_t>(random() % 9);
        const int32_t held_before = table->device_held();
        const absl::Status grown = table->Grow(want);
        if (grown.ok()) tokens[t] = want;
        EXPECT_EQ(table->device_held(), held_before);  // growing uses the reservation only
      } else if (kind == 3) {
        const auto blocks = static_cast<int32_t>(table->device_blocks().size());
        const int32_t begin = blocks == 0 ? 0 : static_cast<int32_t>(random() % blocks);
        table->Evict(begin, begin + static_cast<int32_t>(random() % 4));
      } else {
        table->LimitDevice(static_cast<int32_t>(random() % 6));
      }
      int32_t device_held = 0;
      int32_t host_blocks = 0;
      for (const std::optional<OffloadedBlockTable>& each : tables) {
        if (!each.has_value()) continue;
        const int32_t resident = static_cast<int32_t>(
            std::count_if(each->device_blocks().begin(), each->device_blocks().end(),
                          [](int32_t block) { return block >= 0; }));
        ASSERT_EQ(resident, each->resident());
        ASSERT_EQ(each->device_blocks().size(), each->host_blocks().size());
        device_held += each->device_held();
        host_blocks += static_cast<int32_t>(each->host_blocks().size());
      }
      ASSERT_EQ(device.capacity() - device.available(), device_held) << "op " << op;
      ASSERT_GE(host.capacity() - host.available(), host_blocks);
    }
    tables.clear();
    EXPECT_EQ(device.available(), 24);
    EXPECT_EQ(host.available(), 64);
  }
}

// A resident sequence offloaded and made resident again: the pools count exactly at each stage,
// the host blocks cover every logical block, and the blocks that were not resident come back as
// the recall list.
TEST(OffloadedBlockTableTest, FromResidentAndBackKeepThePoolsExact) {
  BlockPool device(40);
  BlockPool host(40);
  absl::StatusOr<BlockTable> dense = BlockTable::Create(&device, 4, 60);  // 15 blocks
  ASSERT_TRUE(dense.ok());
  ASSERT_TRUE(dense->Grow(30).ok());  // 8 blocks
  const std::vector<int32_t> blocks(dense->blocks().begin(), dense->blocks().end());
  EXPECT_EQ(OffloadedBlockTable::FromResident(*dense, &device, &host, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<OffloadedBlockTable> offloaded =
      OffloadedBlockTable::FromResident(*dense, &device, &host, 5);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  EXPECT_TRUE(dense->blocks().empty());
  EXPECT_THAT(offloaded->device_blocks(), ::testing::ElementsAreArray(blocks));
  EXPECT_EQ(offloaded->host_blocks().size(), 8u);
  EXPECT_EQ(host.allocated(), 8);
  EXPECT_EQ(host.allocated() + host.reserved(), 15);
  // All 8 blocks held; the peak of 5 needs no more reserved.
  EXPECT_EQ(device.allocated(), 8);
  EXPECT_EQ(device.reserved(), 0);
  offloaded->Evict(1, 6);
  offloaded->LimitDevice(5);
  EXPECT_EQ(offloaded->resident(), 3);
  EXPECT_EQ(device.allocated() + device.reserved(), 5);

  absl::StatusOr<OffloadedBlockTable::Resident> resident = offloaded->ToResident();
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_EQ(resident->recall_host.size(), 5u);
  EXPECT_EQ(resident->recall_device.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(resident->recall_host[i], offloaded->host_blocks()[i + 1]);
    EXPECT_EQ(resident->blocks.blocks()[i + 1], resident->recall_device[i]);
  }
  // The worst case is reserved again; the host blocks go back with the offloaded table.
  EXPECT_EQ(device.allocated() + device.reserved(), 15);
  ASSERT_TRUE(resident->blocks.Grow(60).ok());
  offloaded = absl::InternalError("dropped");
  EXPECT_EQ(host.allocated() + host.reserved(), 0);
  EXPECT_EQ(device.allocated(), 15);
}

TEST(OffloadedBlockTableTest, ToResidentWithoutRoomChangesNothing) {
  BlockPool device(10);
  BlockPool host(10);
  absl::StatusOr<BlockTable> dense = BlockTable::Create(&device, 4, 36);  // 9 blocks
  ASSERT_TRUE(dense.ok());
  ASSERT_TRUE(dense->Grow(24).ok());
  absl::StatusOr<OffloadedBlockTable> offloaded =
      OffloadedBlockTable::FromResident(*dense, &device, &host, 3);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  offloaded->Evict(0, 4);
  offloaded->LimitDevice(3);
  ASSERT_TRUE(device.Reserve(device.available()).ok());  // someone else takes the rest
  const int32_t allocated = device.allocated();
  const int32_t reserved = device.reserved();
  EXPECT_EQ(offloaded->ToResident().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(device.allocated(), allocated);
  EXPECT_EQ(device.reserved(), reserved);
  EXPECT_EQ(offloaded->resident(), 2);
}

}  // namespace
}  // namespace pulse
