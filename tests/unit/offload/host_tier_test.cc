// The host tier grows in chunks as blocks are reserved, never beyond what was asked, keeps its
// chunks' addresses where the backend's ops read them, and turns a pin that fails into a
// capacity status that leaves what was pinned usable.
#include "core/offload/host_tier.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/base/host_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

constexpr PagedKvLayout kLayout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 8};  // 512 B

TEST(HostTierTest, GrowsChunkByChunkAndAddressesEveryBlock) {
  std::shared_ptr<Backend> backend = *CreateCpuBackend({.threads = 1});
  // 3 layers x 512 B = 1536 B a block of every layer: 2 blocks a chunk of 3 KiB.
  absl::StatusOr<HostTier> tier = HostTier::Create(*backend, kLayout, 3, 9, 3 << 10, HostCodec::kRaw);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ(tier->blocks_per_chunk(), 2);
  EXPECT_EQ(tier->capacity(), 0);
  EXPECT_EQ(tier->pinned_bytes(), 0);
  ASSERT_TRUE(tier->Reserve(3).ok());
  EXPECT_EQ(tier->capacity(), 4);
  EXPECT_EQ(tier->pinned_bytes(), 2 * 3072);
  ASSERT_TRUE(tier->Reserve(1).ok());  // never shrinks
  EXPECT_EQ(tier->capacity(), 4);
  ASSERT_TRUE(tier->Reserve(9).ok());
  EXPECT_EQ(tier->capacity(), 10);
  EXPECT_EQ(tier->Reserve(10).code(), absl::StatusCode::kInvalidArgument);

  // Every (layer, block) has its own 512 bytes, and the backend's view finds the same address.
  const HostTierView view = tier->view();
  EXPECT_EQ(view.num_blocks, 10);
  std::vector<char*> seen;
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (int32_t block = 0; block < 9; ++block) {
      char* address = tier->block(layer, block);
      EXPECT_EQ(HostTierBlock(view, layer, kLayout.block_bytes(), block), address);
      for (char* other : seen) {
        EXPECT_TRUE(address + 512 <= other || other + 512 <= address);
      }
      seen.push_back(address);
    }
  }
}

TEST(HostTierTest, APinThatFailsIsACapacityStatusAndKeepsWhatWasPinned) {
  // The backend pins at most 7 KiB: two chunks of 3 KiB, not three.
  std::shared_ptr<Backend> backend =
      *CreateCpuBackend({.threads = 1, .host_memory_limit_bytes = 7 << 10});
  absl::StatusOr<HostTier> tier = HostTier::Create(*backend, kLayout, 3, 9, 3 << 10, HostCodec::kRaw);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const absl::Status grown = tier->Reserve(5);
  EXPECT_EQ(grown.code(), absl::StatusCode::kResourceExhausted) << grown;
  EXPECT_EQ(tier->capacity(), 4);
  EXPECT_TRUE(tier->Reserve(4).ok());
  EXPECT_EQ(HostTier::Create(*backend, kLayout, 0, 9, 1024, HostCodec::kRaw).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A chunk that would take what the host has left is refused before it is pinned: pinning it
// would make the kernel kill a process instead of failing.
TEST(HostTierTest, AChunkTheHostCannotSpareIsACapacityStatus) {
  const std::optional<int64_t> available = AvailableHostMemoryBytes();
  if (!available) GTEST_SKIP() << "the host does not say how much memory it has available";
  std::shared_ptr<Backend> backend = *CreateCpuBackend({.threads = 1});
  absl::StatusOr<HostTier> tier = HostTier::Create(*backend, kLayout, 3, 1 << 30, 2 * *available, HostCodec::kRaw);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const absl::Status grown = tier->Reserve(1);
  EXPECT_EQ(grown.code(), absl::StatusCode::kResourceExhausted) << grown;
  EXPECT_THAT(grown.message(), ::testing::HasSubstr("available"));
  EXPECT_EQ(tier->capacity(), 0);
  EXPECT_EQ(tier->pinned_bytes(), 0);
}

}  // namespace
}  // namespace pulse
