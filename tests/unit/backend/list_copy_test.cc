// The copy engine's recall and write-back of lists the device built (Backend::EnqueueRecall,
// EnqueueWriteBack), on each backend: whole blocks (one set) or one KV head's key and value
// fragments (headwise) from a host tier of two chunks into device slots, and filled blocks back,
// against the bytes they must move. The CUDA instance is skipped without a device.
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"

namespace pulse {
namespace {

class ListCopyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda") {
      if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
      absl::StatusOr<std::shared_ptr<Backend>> cuda = CreateCudaBackend({});
      ASSERT_TRUE(cuda.ok()) << cuda.status();
      backend_ = *cuda;
    } else {
      backend_ = ::pulse::testing::MakeCpuBackend(2);
    }
  }

  template <typename T>
  DeviceBuffer Upload(const std::vector<T>& values) {
    return ::pulse::testing::UploadVector(*backend_, values);
  }
  template <typename T>
  std::vector<T> Download(const DeviceBuffer& buffer, size_t count) {
    return ::pulse::testing::DownloadVector<T>(*backend_, buffer, count);
  }

  std::shared_ptr<Backend> backend_;
};

TEST_P(ListCopyTest, RecallAndWriteBackMoveTheBlocksTheListsName) {
  const PagedKvLayout layout{
      .block_tokens = 16, .num_kv_heads = 4, .head_dim = 64, .type = backend_->kv_type()};
  const int64_t block_bytes = layout.block_bytes();
  constexpr int32_t kLayers = 3;
  constexpr int32_t kPerChunk = 5;
  constexpr int32_t kHostBlocks = 2 * kPerChunk;
  constexpr int32_t kDeviceBlocks = 12;
  constexpr int32_t kLayer = 1;
  std::vector<HostBuffer> chunks;
  std::vector<uint64_t> addresses;
  std::mt19937 rng(5);
  for (int c = 0; c < 2; ++c) {
    absl::StatusOr<HostBuffer> chunk =
        backend_->AllocateHost(static_cast<size_t>(kLayers * kPerChunk * block_bytes));
    ASSERT_TRUE(chunk.ok()) << chunk.status();
    auto* bytes = chunk->as<uint8_t>();
    for (size_t i = 0; i < chunk->bytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
    addresses.push_back(reinterpret_cast<uint64_t>(chunk->data()));
    chunks.push_back(*std::move(chunk));
  }
  const DeviceBuffer d_addresses = Upload(addresses);
  const HostTierView host{.chunks = d_addresses.as<uint64_t>(),
                          .blocks_per_chunk = kPerChunk,
                          .num_blocks = kHostBlocks};
  const HostTierView host_side{
      .chunks = addresses.data(), .blocks_per_chunk = kPerChunk, .num_blocks = kHostBlocks};
  absl::StatusOr<std::unique_ptr<CopyEvent>> done = backend_->CreateCopyEvent();
  ASSERT_TRUE(done.ok());
  for (const int32_t sets : {1, 4}) {
    // `cache` is the device cache's bytes before the recall, then the bytes it must hold after.
    std::vector<uint8_t> cache(static_cast<size_t>(kDeviceBlocks * block_bytes), 0xAB);
    const DeviceBuffer d_cache = Upload(cache);
    // Set s recalls host blocks into slots; first_slot 2.
    std::vector<RecallEntry> entries(static_cast<size_t>(sets * 3));
    std::vector<int32_t> counts(static_cast<size_t>(sets));
    for (int32_t s = 0; s < sets; ++s) {
      counts[static_cast<size_t>(s)] = 1 + s % 3;
      for (int32_t i = 0; i < counts[static_cast<size_t>(s)]; ++i) {
        entries[static_cast<size_t>(s * 3 + i)] = {.host_block = (3 * s + 4 * i + 1) % kHostBlocks,
                                                   .slot = (s + 3 * i) % 9};
      }
    }
    const DeviceBuffer d_entries = Upload(entries);
    const DeviceBuffer d_counts = Upload(counts);
    ASSERT_TRUE(backend_
                    ->EnqueueRecall({.entries = d_entries.as<RecallEntry>(),
                                     .counts = d_counts.as<int32_t>(),
                                     .capacity = 3},
                                    sets, host, kLayer, d_cache.data(), 2, layout, **done)
                    .ok());
    ASSERT_TRUE(backend_->WaitForCopy(**done).ok());
    const std::vector<uint8_t> got = Download<uint8_t>(d_cache, cache.size());
    const auto element = static_cast<int64_t>(DTypeBytes(layout.type));
    const int64_t fragment = layout.head_elems() * element;
    const int64_t values = layout.value_offset() * element;
    for (int32_t s = 0; s < sets; ++s) {
      for (int32_t i = 0; i < counts[static_cast<size_t>(s)]; ++i) {
        const RecallEntry& entry = entries[static_cast<size_t>(s * 3 + i)];
        const char* src = HostTierBlock(host_side, kLayer, block_bytes, entry.host_block);
        const int64_t dst = (2 + entry.slot) * block_bytes;
        for (const int64_t offset :
             sets == 1 ? std::vector<int64_t>{0}
                       : std::vector<int64_t>{s * fragment, values + s * fragment}) {
          const int64_t size = sets == 1 ? block_bytes : fragment;
          std::memcpy(cache.data() + dst + offset, src + offset, static_cast<size_t>(size));
        }
      }
    }
    EXPECT_EQ(got, cache) << sets << " sets";
  }

  // Write-back of two filled blocks (a negative entry is padding) into the host tier.
  std::vector<uint8_t> cache(static_cast<size_t>(kDeviceBlocks * block_bytes));
  for (uint8_t& byte : cache) byte = static_cast<uint8_t>(rng());
  const DeviceBuffer d_cache = Upload(cache);
  const std::vector<WriteBackEntry> filled = {{3, 7}, {-1, 0}, {10, 2}};
  const DeviceBuffer d_filled = Upload(filled);
  ASSERT_TRUE(backend_
                  ->EnqueueWriteBack(d_filled.as<WriteBackEntry>(), 3, host, kLayer, d_cache.data(),
                                     layout, **done)
                  .ok());
  ASSERT_TRUE(backend_->SynchronizeCopy(**done).ok());
  for (const WriteBackEntry& entry : {filled[0], filled[2]}) {
    EXPECT_EQ(std::memcmp(HostTierBlock(host_side, kLayer, block_bytes, entry.host_block),
                          cache.data() + entry.device_block * block_bytes,
                          static_cast<size_t>(block_bytes)),
              0);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ListCopyTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pulse
