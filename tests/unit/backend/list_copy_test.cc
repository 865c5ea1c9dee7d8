// The copy engine's recall and write-back of lists the device built (Backend::EnqueueRecall,
// EnqueueWriteBack), on each backend: whole blocks (one set) or one KV head's key and value
// fragments (headwise) from a host tier of two chunks into device slots, and filled blocks back,
// against the bytes they must move. The CUDA instance is skipped without a device.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/backend/bf16.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/backend/reference/fp8_kv_block.h"
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

  // Recalls set s's counts[s] entries of `entries` (rows of `capacity`, a set each) from
  // `layer` of `host` into the slots of `layer_blocks` from block 2, and waits for the copy.
  absl::Status Recall(const std::vector<RecallEntry>& entries, const std::vector<int32_t>& counts,
                      int32_t capacity, const HostTierView& host, int32_t layer, void* layer_blocks,
                      const PagedKvLayout& layout, CopyEvent& done) {
    const DeviceBuffer d_entries = Upload(entries);
    const DeviceBuffer d_counts = Upload(counts);
    PULSE_RETURN_IF_ERROR(backend_->EnqueueRecall({.entries = d_entries.as<RecallEntry>(),
                                                   .counts = d_counts.as<int32_t>(),
                                                   .capacity = capacity},
                                                  static_cast<int32_t>(counts.size()), host, layer,
                                                  layer_blocks, 2, layout, done));
    return backend_->WaitForCopy(done);
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
    ASSERT_TRUE(Recall(entries, counts, 3, host, kLayer, d_cache.data(), layout, **done).ok());
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

// With an fp8 host tier (HostCodec::kFp8E4m3) the write-back stores each block's encoding and
// the recall decodes into the slots (whole blocks, or a KV head's key and value parts), bit for
// bit as the reference codec does. Three KV heads: the scales are padded.
TEST_P(ListCopyTest, AnFp8HostTierIsEncodedOnWriteBackAndDecodedOnRecall) {
  const PagedKvLayout layout{
      .block_tokens = 8, .num_kv_heads = 3, .head_dim = 16, .type = backend_->kv_type()};
  const int64_t block_bytes = layout.block_bytes();
  const int64_t host_bytes = HostBlockBytes(layout, HostCodec::kFp8E4m3);
  constexpr int32_t kLayers = 2;
  constexpr int32_t kHostBlocks = 4;
  constexpr int32_t kDeviceBlocks = 6;
  constexpr int32_t kLayer = 1;
  absl::StatusOr<HostBuffer> chunk =
      backend_->AllocateHost(static_cast<size_t>(kLayers * kHostBlocks * host_bytes));
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  std::memset(chunk->data(), 0, chunk->bytes());
  const std::vector<uint64_t> addresses = {reinterpret_cast<uint64_t>(chunk->data())};
  const DeviceBuffer d_addresses = Upload(addresses);
  const HostTierView host{.chunks = d_addresses.as<uint64_t>(),
                          .blocks_per_chunk = kHostBlocks,
                          .num_blocks = kHostBlocks,
                          .codec = HostCodec::kFp8E4m3};
  const HostTierView host_side{.chunks = addresses.data(),
                               .blocks_per_chunk = kHostBlocks,
                               .num_blocks = kHostBlocks,
                               .codec = HostCodec::kFp8E4m3};
  absl::StatusOr<std::unique_ptr<CopyEvent>> done = backend_->CreateCopyEvent();
  ASSERT_TRUE(done.ok());

  // Device blocks of normal values, each KV head's parts at its own spread.
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> values(static_cast<size_t>(kDeviceBlocks * layout.block_elems()));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] =
        normal(rng) * static_cast<float>(1 + i / static_cast<size_t>(layout.head_elems()) % 5);
  }
  std::vector<std::byte> cache(static_cast<size_t>(kDeviceBlocks * block_bytes));
  for (size_t i = 0; i < values.size(); ++i) {
    if (layout.type == DType::kBF16) {
      const uint16_t bits = F32ToBf16(values[i]);
      std::memcpy(cache.data() + 2 * i, &bits, 2);
    } else {
      std::memcpy(cache.data() + 4 * i, &values[i], 4);
    }
  }
  const DeviceBuffer d_cache = Upload(cache);
  const std::vector<WriteBackEntry> filled = {{1, 3}, {-1, 0}, {4, 0}};
  const DeviceBuffer d_filled = Upload(filled);
  const absl::Status wrote = backend_->EnqueueWriteBack(d_filled.as<WriteBackEntry>(), 3, host,
                                                        kLayer, d_cache.data(), layout, **done);
  ASSERT_TRUE(wrote.ok()) << wrote;
  ASSERT_TRUE(backend_->SynchronizeCopy(**done).ok());
  const auto block = [&](const std::vector<std::byte>& bytes, int64_t b) {
    return std::span(bytes).subspan(static_cast<size_t>(b * block_bytes),
                                    static_cast<size_t>(block_bytes));
  };
  const auto host_block = [&](int32_t b) {
    return std::span(reinterpret_cast<std::byte*>(HostTierBlock(host_side, kLayer, host_bytes, b)),
                     static_cast<size_t>(host_bytes));
  };
  for (const WriteBackEntry& entry : {filled[0], filled[2]}) {
    std::vector<std::byte> want(static_cast<size_t>(host_bytes));
    EncodeFp8KvBlock(layout, block(cache, entry.device_block), want);
    const std::span<std::byte> got = host_block(entry.host_block);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << entry.host_block;
  }

  for (const int32_t sets : {1, 3}) {
    // Set s recalls one block into slot s of the slots from block 2: set 0 host block 3, the
    // others host block 0.
    std::vector<std::byte> slots(cache.size(), std::byte{0x5A});
    const DeviceBuffer d_slots = Upload(slots);
    std::vector<RecallEntry> entries;
    std::vector<int32_t> counts;
    for (int32_t s = 0; s < sets; ++s) {
      entries.push_back({.host_block = s == 0 ? 3 : 0, .slot = s});
      counts.push_back(1);
    }
    ASSERT_TRUE(Recall(entries, counts, 1, host, kLayer, d_slots.data(), layout, **done).ok());
    for (int32_t s = 0; s < sets; ++s) {
      const std::span<std::byte> dst = std::span(slots).subspan(
          static_cast<size_t>((2 + s) * block_bytes), static_cast<size_t>(block_bytes));
      const std::span<std::byte> src = host_block(entries[static_cast<size_t>(s)].host_block);
      if (sets == 1) {
        DecodeFp8KvBlock(layout, src, dst);
      } else {
        DecodeFp8KvPart(layout, src, s, dst);
        DecodeFp8KvPart(layout, src, layout.num_kv_heads + s, dst);
      }
    }
    EXPECT_EQ(Download<std::byte>(d_slots, slots.size()), slots) << sets << " sets";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ListCopyTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pulse
