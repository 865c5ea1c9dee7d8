// The CUDA backend's host tier and copy engine: every executor leaves exactly the bytes memcpy
// would, both ways, over random scattered chunks into poisoned tiers; events order compute after
// recall and write-back after compute; plans with the fp8 codec convert as the reference codec
// does. Skipped without a CUDA device.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "core/backend/bf16.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/backend/reference/fp8_kv_block.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/copy_test_util.h"
#include "tests/unit/backend/op_test_util.h"

namespace pulse {
namespace {

using ::pulse::testing::ExpectPlanCopiesExactly;
using ::pulse::testing::kPoison;
using ::pulse::testing::MakeCpuBackend;
using ::pulse::testing::RandomBytes;
using ::pulse::testing::RandomChunks;
using ::pulse::testing::TierBytes;

constexpr CopyExecutor kExecutors[] = {CopyExecutor::kGather, CopyExecutor::kBatchDma,
                                       CopyExecutor::kPerChunk};
// Rows of bf16 KV: one head's keys of a 32-token block of head_dim 128 (8 KiB) each.
constexpr size_t kRowBytes = 32 * 128 * 2;
constexpr int64_t kRows = 32768;  // 256 MiB
constexpr size_t kTierBytes = kRows * kRowBytes;

class CudaCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::shared_ptr<Backend>> cuda = CreateCudaBackend({});
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    cuda_ = *cuda;
  }

  HostBuffer Host(size_t bytes) {
    absl::StatusOr<HostBuffer> buffer = cuda_->AllocateHost(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    return *std::move(buffer);
  }
  DeviceBuffer Device(size_t bytes) {
    absl::StatusOr<DeviceBuffer> buffer = cuda_->Allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    return *std::move(buffer);
  }
  DeviceBuffer Upload(const std::vector<unsigned char>& bytes) {
    DeviceBuffer buffer = Device(bytes.size());
    cuda_->CopyToDevice(buffer.data(), bytes.data(), bytes.size());
    return buffer;
  }
  std::vector<unsigned char> Download(const DeviceBuffer& buffer) {
    std::vector<unsigned char> bytes(buffer.bytes());
    const absl::Status status = cuda_->CopyToHost(bytes.data(), buffer.data(), bytes.size());
    EXPECT_TRUE(status.ok()) << status;
    return bytes;
  }
  std::unique_ptr<CopyEvent> Event() {
    absl::StatusOr<std::unique_ptr<CopyEvent>> event = cuda_->CreateCopyEvent();
    EXPECT_TRUE(event.ok()) << event.status();
    return *std::move(event);
  }
  // GatherRows copies rows of activations: a row of kRowBytes.
  int64_t RowElems() const { return kRowBytes / DTypeBytes(cuda_->activation_type()); }
  DeviceBuffer Identity(int64_t count) {
    std::vector<int32_t> rows(count);
    std::iota(rows.begin(), rows.end(), 0);
    DeviceBuffer buffer = Device(rows.size() * sizeof(int32_t));
    cuda_->CopyToDevice(buffer.data(), rows.data(), buffer.bytes());
    return buffer;
  }

  std::shared_ptr<Backend> cuda_;
};

TEST_F(CudaCopyTest, HostMemoryFailsCleanlyWhenItCannotBePinned) {
  HostBuffer tier = Host(1 << 20);
  ASSERT_FALSE(tier.empty());
  std::memset(tier.data(), 1, tier.bytes());
  absl::StatusOr<HostBuffer> absurd = cuda_->AllocateHost(size_t{1} << 60);
  EXPECT_EQ(absurd.status().code(), absl::StatusCode::kResourceExhausted) << absurd.status();
  // The failure left nothing behind for later work to trip over.
  EXPECT_FALSE(Host(4096).empty());
  ExpectPlanCopiesExactly(*cuda_, CopyDirection::kHostToDevice, CopyExecutor::kGather,
                          std::vector<size_t>{4096}, 64, 1);
  EXPECT_TRUE(cuda_->Synchronize().ok());
}

class CudaExecutorTest
    : public CudaCopyTest,
      public ::testing::WithParamInterface<std::tuple<CopyDirection, CopyExecutor>> {};

TEST_P(CudaExecutorTest, LeavesTheBytesMemcpyWould) {
  const auto [direction, executor] = GetParam();
  const size_t fragments[] = {4096};
  const size_t head_fragments[] = {8192};
  const size_t blocks[] = {65536};
  const size_t solohead_blocks[] = {131072};
  const size_t mixed[] = {16, 48, 4096, 8192, 20000, 131072, (size_t{1} << 20) + 16};
  ExpectPlanCopiesExactly(*cuda_, direction, executor, fragments, 8192, 1);
  ExpectPlanCopiesExactly(*cuda_, direction, executor, head_fragments, 4096, 2);
  ExpectPlanCopiesExactly(*cuda_, direction, executor, blocks, 1024, 3);
  ExpectPlanCopiesExactly(*cuda_, direction, executor, solohead_blocks, 256, 4);
  ExpectPlanCopiesExactly(*cuda_, direction, executor, mixed, 200, 5);
}

INSTANTIATE_TEST_SUITE_P(
    All, CudaExecutorTest,
    ::testing::Combine(::testing::Values(CopyDirection::kHostToDevice,
                                         CopyDirection::kDeviceToHost),
                       ::testing::Values(CopyExecutor::kAuto, CopyExecutor::kGather,
                                         CopyExecutor::kBatchDma, CopyExecutor::kPerChunk)));

// A plan with the fp8 codec encodes bf16 blocks towards the host and decodes them back, bit for
// bit as the reference codec does, with every executor (each runs on the gather kernel): blocks
// of normal values at spreads from 2^-12 to 2^12, one of zeros and one past fp8's range; three KV
// heads, so the scales are padded.
TEST_F(CudaCopyTest, Fp8PlansEncodeAndDecodeWholeBlocksWithEveryExecutor) {
  const PagedKvLayout layout{
      .block_tokens = 16, .num_kv_heads = 3, .head_dim = 64, .type = DType::kBF16};
  const auto block = static_cast<size_t>(layout.block_bytes());
  const auto encoded = static_cast<size_t>(HostBlockBytes(layout, HostCodec::kFp8E4m3));
  constexpr size_t kBlocks = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<unsigned char> blocks(kBlocks * block);
  for (size_t b = 0; b < kBlocks; ++b) {
    const float spread = b == 0   ? 0.0f
                         : b == 1 ? 1e6f
                                  : std::ldexp(1.0f, static_cast<int>(b % 25) - 12);
    for (size_t i = 0; i < block / 2; ++i) {
      const uint16_t bits = F32ToBf16(normal(rng) * spread);
      std::memcpy(blocks.data() + b * block + 2 * i, &bits, 2);
    }
  }
  std::vector<unsigned char> want_encoded(kBlocks * encoded);
  std::vector<unsigned char> want_decoded(kBlocks * block);
  const auto bytes = [](std::vector<unsigned char>& v, size_t at, size_t n) {
    return std::as_writable_bytes(std::span(v).subspan(at, n));
  };
  for (size_t b = 0; b < kBlocks; ++b) {
    EncodeFp8KvBlock(layout, bytes(blocks, b * block, block),
                     bytes(want_encoded, b * encoded, encoded));
    DecodeFp8KvBlock(layout, bytes(want_encoded, b * encoded, encoded),
                     bytes(want_decoded, b * block, block));
  }
  const DeviceBuffer device = Upload(blocks);
  HostBuffer host = Host(kBlocks * encoded);
  std::unique_ptr<CopyEvent> event = Event();
  // Block b goes to the host's slot kBlocks - 1 - b and comes back to b.
  const auto plan = [&](CopyDirection direction, CopyExecutor executor, void* to) {
    std::vector<CopyChunk> chunks;
    for (size_t b = 0; b < kBlocks; ++b) {
      char* on_host = host.as<char>() + (kBlocks - 1 - b) * encoded;
      char* on_device = static_cast<char*>(to) + b * block;
      chunks.push_back(direction == CopyDirection::kDeviceToHost
                           ? CopyChunk{device.as<char>() + b * block, on_host, block}
                           : CopyChunk{on_host, on_device, block});
    }
    const absl::Status enqueued = cuda_->EnqueueCopy({.direction = direction,
                                                      .chunks = chunks,
                                                      .executor = executor,
                                                      .codec = HostCodec::kFp8E4m3,
                                                      .layout = layout},
                                                     *event);
    return enqueued.ok() ? cuda_->SynchronizeCopy(*event) : enqueued;
  };
  for (const CopyExecutor executor : kExecutors) {
    SCOPED_TRACE(CopyExecutorName(executor));
    std::memset(host.data(), kPoison, host.bytes());
    ASSERT_TRUE(plan(CopyDirection::kDeviceToHost, executor, nullptr).ok());
    for (size_t b = 0; b < kBlocks; ++b) {
      EXPECT_EQ(std::memcmp(host.as<char>() + (kBlocks - 1 - b) * encoded,
                            want_encoded.data() + b * encoded, encoded),
                0)
          << "block " << b;
    }
    DeviceBuffer back = Upload(std::vector<unsigned char>(kBlocks * block, kPoison));
    ASSERT_TRUE(plan(CopyDirection::kHostToDevice, executor, back.data()).ok());
    EXPECT_EQ(Download(back), want_decoded);
  }
}

TEST_F(CudaCopyTest, GatherOnOneBlockCoversEveryPiece) {
  absl::StatusOr<std::shared_ptr<Backend>> one_block = CreateCudaBackend({.copy_gather_blocks = 1});
  ASSERT_TRUE(one_block.ok()) << one_block.status();
  const size_t mixed[] = {16, 4096, 65536 + 16};
  for (const CopyDirection direction :
       {CopyDirection::kHostToDevice, CopyDirection::kDeviceToHost}) {
    ExpectPlanCopiesExactly(**one_block, direction, CopyExecutor::kGather, mixed, 500, 6);
  }
  EXPECT_EQ(CreateCudaBackend({.copy_gather_blocks = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaCopyTest, ComputeAfterWaitForCopySeesTheRecall) {
  HostBuffer host = Host(kTierBytes);
  const std::vector<unsigned char> values = RandomBytes(kTierBytes, 7);
  std::memcpy(host.data(), values.data(), kTierBytes);
  const std::vector<unsigned char> poison(kTierBytes, kPoison);
  DeviceBuffer slots = Device(kTierBytes);
  DeviceBuffer out = Device(kTierBytes);
  DeviceBuffer rows = Identity(kRows);
  std::vector<int64_t> slot_of(kRows);
  std::iota(slot_of.begin(), slot_of.end(), 0);
  std::shuffle(slot_of.begin(), slot_of.end(), std::mt19937_64(8));
  std::vector<CopyChunk> chunks(kRows);
  std::vector<unsigned char> expected(kTierBytes);
  for (int64_t r = 0; r < kRows; ++r) {
    chunks[r] = {host.as<unsigned char>() + r * kRowBytes,
                 slots.as<unsigned char>() + slot_of[r] * kRowBytes, kRowBytes};
    std::memcpy(expected.data() + slot_of[r] * kRowBytes, values.data() + r * kRowBytes, kRowBytes);
  }
  std::unique_ptr<CopyEvent> recalled = Event();
  for (const CopyExecutor executor : kExecutors) {
    cuda_->CopyToDevice(slots.data(), poison.data(), kTierBytes);
    // The copy stream must not start before the poison is in.
    ASSERT_TRUE(cuda_->Synchronize().ok());
    ASSERT_TRUE(cuda_->EnqueueCopy({.chunks = chunks, .executor = executor}, *recalled).ok());
    ASSERT_TRUE(cuda_->WaitForCopy(*recalled).ok());
    cuda_->GatherRows(slots.data(), RowElems(), rows.as<int32_t>(), kRows, out.data());
    EXPECT_TRUE(Download(out) == expected) << CopyExecutorName(executor);
  }
}

TEST_F(CudaCopyTest, WriteBackAfterComputeSeesWhatComputeWrote) {
  const std::vector<unsigned char> values = RandomBytes(kTierBytes, 9);
  DeviceBuffer source = Upload(values);
  DeviceBuffer blocks = Upload(std::vector<unsigned char>(kTierBytes, kPoison));
  DeviceBuffer rows = Identity(kRows);
  HostBuffer host = Host(kTierBytes);
  std::vector<CopyChunk> chunks(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    chunks[r] = {blocks.as<unsigned char>() + r * kRowBytes,
                 host.as<unsigned char>() + (kRows - 1 - r) * kRowBytes, kRowBytes};
  }
  std::vector<unsigned char> expected(kTierBytes);
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(expected.data() + (kRows - 1 - r) * kRowBytes, values.data() + r * kRowBytes,
                kRowBytes);
  }
  std::unique_ptr<CopyEvent> written = Event();
  for (const CopyExecutor executor : kExecutors) {
    cuda_->CopyToDevice(blocks.data(), std::vector<unsigned char>(kTierBytes, kPoison).data(),
                        kTierBytes);
    std::memset(host.data(), kPoison, kTierBytes);
    ASSERT_TRUE(cuda_->Synchronize().ok());
    // Compute fills the blocks (several times over, so that it is still running when the plan
    // is enqueued), then the plan writes them back.
    for (int i = 0; i < 20; ++i) {
      cuda_->GatherRows(source.data(), RowElems(), rows.as<int32_t>(), kRows, blocks.data());
    }
    const CopyPlan plan{.direction = CopyDirection::kDeviceToHost,
                        .chunks = chunks,
                        .executor = executor,
                        .after_compute = true};
    ASSERT_TRUE(cuda_->EnqueueCopy(plan, *written).ok());
    ASSERT_TRUE(cuda_->SynchronizeCopy(*written).ok());
    EXPECT_EQ(std::memcmp(host.data(), expected.data(), kTierBytes), 0)
        << CopyExecutorName(executor);
  }
}

TEST_F(CudaCopyTest, PlansInFlightKeepTheirOwnChunkLists) {
  // Gather plans that grow past the staging's first size (4096 pieces of 16 KiB) while earlier
  // ones are in flight, with the other executors in between on the same stream.
  constexpr int kPlans = 16;
  const size_t sizes[] = {131072, 65536 + 16};
  const size_t region_bytes = TierBytes(sizes, 400);
  HostBuffer host = Host(region_bytes);
  const std::vector<unsigned char> values = RandomBytes(region_bytes, 10);
  std::memcpy(host.data(), values.data(), region_bytes);
  DeviceBuffer device = Upload(std::vector<unsigned char>(kPlans * region_bytes, kPoison));
  ASSERT_TRUE(cuda_->Synchronize().ok());
  std::vector<unsigned char> expected(kPlans * region_bytes, kPoison);
  auto* const device_base = device.as<unsigned char>();
  std::unique_ptr<CopyEvent> done = Event();
  std::mt19937_64 rng(11);
  for (int p = 0; p < kPlans; ++p) {
    const std::vector<CopyChunk> chunks =
        RandomChunks(host.as<unsigned char>(), region_bytes, device_base + p * region_bytes,
                     region_bytes, sizes, 16 + 50 * p, rng);
    for (const CopyChunk& chunk : chunks) {
      std::memcpy(
          expected.data() + (static_cast<unsigned char*>(chunk.dst) - device_base),
          values.data() + (static_cast<const unsigned char*>(chunk.src) - host.as<unsigned char>()),
          chunk.bytes);
    }
    const CopyExecutor executor = p % 4 == 3 ? kExecutors[1 + p / 4 % 2] : CopyExecutor::kGather;
    ASSERT_TRUE(cuda_->EnqueueCopy({.chunks = chunks, .executor = executor}, *done).ok());
  }
  ASSERT_TRUE(cuda_->SynchronizeCopy(*done).ok());
  EXPECT_TRUE(Download(device) == expected);
}

TEST_F(CudaCopyTest, MarkersTimePlans) {
  constexpr size_t kBytes = size_t{64} << 20;
  HostBuffer host = Host(kBytes);
  std::memset(host.data(), 3, kBytes);
  DeviceBuffer device = Device(kBytes);
  std::unique_ptr<CopyEvent> start = Event();
  std::unique_ptr<CopyEvent> end = Event();
  EXPECT_TRUE(*cuda_->CopyDone(*start));
  EXPECT_EQ(cuda_->CopySeconds(*start, *end).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const CopyChunk chunk{host.data(), device.data(), kBytes};
  ASSERT_TRUE(cuda_->EnqueueCopy({.chunks = {}}, *start).ok());
  ASSERT_TRUE(cuda_->EnqueueCopy({.chunks = {&chunk, 1}}, *end).ok());
  ASSERT_TRUE(cuda_->SynchronizeCopy(*end).ok());
  EXPECT_TRUE(*cuda_->CopyDone(*end));
  absl::StatusOr<double> seconds = cuda_->CopySeconds(*start, *end);
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_GT(*seconds, 0.0);
  EXPECT_LT(*seconds, 1.0);  // 64 MiB at > 67 MB/s
}

TEST_F(CudaCopyTest, BadPlansAndForeignEventsAreRefused) {
  HostBuffer host = Host(4096);
  DeviceBuffer device = Device(4096);
  std::unique_ptr<CopyEvent> event = Event();
  const CopyChunk overlapping[] = {{host.data(), device.data(), 256},
                                   {host.data(), device.as<unsigned char>() + 128, 256}};
  EXPECT_EQ(cuda_->EnqueueCopy({.chunks = overlapping}, *event).code(),
            absl::StatusCode::kInvalidArgument);
  auto cpu = MakeCpuBackend(1);
  std::unique_ptr<CopyEvent> foreign = *cpu->CreateCopyEvent();
  EXPECT_EQ(cuda_->EnqueueCopy({.chunks = {}}, *foreign).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda_->WaitForCopy(*foreign).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cuda_->Synchronize().ok());
}

}  // namespace
}  // namespace pulse
