// The CPU backend's host tier and copy engine: plans run on the copy thread in order, events
// wait, an injected delay makes a wait really wait, and bad plans are refused untouched.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/reference/fp8_kv_block.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/copy_test_util.h"

namespace pulse {
namespace {

using ::pulse::testing::ExpectPlanCopiesExactly;
using ::pulse::testing::kPoison;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr absl::Duration kDelay = absl::Milliseconds(200);

std::shared_ptr<Backend> MakeBackend(CpuBackendOptions options = {}) {
  options.threads = 1;
  absl::StatusOr<std::shared_ptr<Backend>> backend = CreateCpuBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *backend;
}

std::unique_ptr<CopyEvent> MakeEvent(Backend& backend) {
  absl::StatusOr<std::unique_ptr<CopyEvent>> event = backend.CreateCopyEvent();
  EXPECT_TRUE(event.ok()) << event.status();
  return *std::move(event);
}

HostBuffer Host(Backend& backend, size_t bytes, unsigned char fill) {
  absl::StatusOr<HostBuffer> buffer = backend.AllocateHost(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  std::memset(buffer->data(), fill, bytes);
  return *std::move(buffer);
}

DeviceBuffer Device(Backend& backend, size_t bytes, unsigned char fill) {
  absl::StatusOr<DeviceBuffer> buffer = backend.Allocate(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  std::memset(buffer->data(), fill, bytes);
  return *std::move(buffer);
}

bool AllBytesAre(const void* data, size_t bytes, unsigned char value) {
  const auto* p = static_cast<const unsigned char*>(data);
  return std::all_of(p, p + bytes, [value](unsigned char b) { return b == value; });
}

bool Done(Backend& backend, const CopyEvent& event) {
  absl::StatusOr<bool> done = backend.CopyDone(event);
  EXPECT_TRUE(done.ok()) << done.status();
  return done.value_or(false);
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

TEST(CpuHostMemoryTest, AllocationsAreAlignedAndWritable) {
  auto backend = MakeBackend();
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 20}) {
    absl::StatusOr<HostBuffer> buffer = backend->AllocateHost(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_NE(buffer->data(), nullptr);
    EXPECT_EQ(buffer->bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % 64, 0u);
    std::memset(buffer->data(), 0xAB, bytes);
  }
}

TEST(CpuHostMemoryTest, BeyondTheHostLimitIsResourceExhausted) {
  auto backend = MakeBackend({.memory_limit_bytes = 4096, .host_memory_limit_bytes = 8192});
  absl::StatusOr<HostBuffer> first = backend->AllocateHost(6000);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<HostBuffer> second = backend->AllocateHost(3000);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), HasSubstr("host"));
  EXPECT_THAT(second.status().message(), HasSubstr("8192"));
  // The device budget is separate.
  EXPECT_TRUE(backend->Allocate(4096).ok());
  EXPECT_EQ(backend->AvailableBytes(), 4096u);

  *first = HostBuffer();
  EXPECT_TRUE(backend->AllocateHost(8192).ok());
  EXPECT_EQ(backend->AllocateHost(std::numeric_limits<size_t>::max()).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(CpuHostMemoryTest, TheHostTierGrowsInChunksUntilFull) {
  constexpr size_t kChunk = 1 << 16;
  auto backend = MakeBackend({.host_memory_limit_bytes = 10 * kChunk + 100});
  std::vector<HostBuffer> tier;
  for (;;) {
    absl::StatusOr<HostBuffer> chunk = backend->AllocateHost(kChunk);
    if (!chunk.ok()) {
      EXPECT_EQ(chunk.status().code(), absl::StatusCode::kResourceExhausted);
      break;
    }
    tier.push_back(*std::move(chunk));
  }
  EXPECT_EQ(tier.size(), 10u);
}

TEST(CpuCopyTest, RejectsBadCopyDelays) {
  EXPECT_EQ(CreateCpuBackend({.copy_delay = absl::Milliseconds(-1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCpuBackend({.copy_delay = absl::InfiniteDuration()}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuCopyTest, ExecutorsLeaveTheSameBytesBothWays) {
  auto backend = MakeBackend();
  const size_t fragments[] = {4096, 8192};
  const size_t mixed[] = {16, 48, 4096, 20000, 65536, 131072 + 16};
  for (const CopyDirection direction :
       {CopyDirection::kHostToDevice, CopyDirection::kDeviceToHost}) {
    for (const CopyExecutor executor : {CopyExecutor::kAuto, CopyExecutor::kGather,
                                        CopyExecutor::kBatchDma, CopyExecutor::kPerChunk}) {
      ExpectPlanCopiesExactly(*backend, direction, executor, fragments, 300, 1);
      ExpectPlanCopiesExactly(*backend, direction, executor, mixed, 60, 2);
    }
  }
}

TEST(CpuCopyTest, PlansCompleteInOrder) {
  constexpr size_t kBytes = 4096;
  constexpr int kPlans = 5;
  auto backend = MakeBackend({.copy_delay = absl::Milliseconds(20)});
  DeviceBuffer dst = Device(*backend, kBytes, kPoison);
  std::vector<HostBuffer> sources;
  std::vector<std::unique_ptr<CopyEvent>> events;
  for (int p = 0; p < kPlans; ++p) {
    sources.push_back(Host(*backend, kBytes, static_cast<unsigned char>(p)));
    events.push_back(MakeEvent(*backend));
    const CopyChunk chunk{sources[p].data(), dst.data(), kBytes};
    ASSERT_TRUE(backend->EnqueueCopy({.chunks = {&chunk, 1}}, *events[p]).ok());
  }
  ASSERT_TRUE(backend->SynchronizeCopy(*events[2]).ok());
  EXPECT_TRUE(Done(*backend, *events[0]));
  EXPECT_TRUE(Done(*backend, *events[1]));
  ASSERT_TRUE(backend->SynchronizeCopy(*events[kPlans - 1]).ok());
  // The last plan wrote last, and each plan ended at least one delay after the one before.
  EXPECT_TRUE(AllBytesAre(dst.data(), kBytes, kPlans - 1));
  for (int p = 0; p + 1 < kPlans; ++p) {
    absl::StatusOr<double> seconds = backend->CopySeconds(*events[p], *events[p + 1]);
    ASSERT_TRUE(seconds.ok()) << seconds.status();
    EXPECT_GE(*seconds, 0.019);
  }
}

TEST(CpuCopyTest, LateRecallMakesComputeWait) {
  constexpr int64_t kRows = 8;
  constexpr int64_t kCols = 64;
  constexpr size_t kBytes = kRows * kCols * sizeof(float);
  auto backend = MakeBackend({.copy_delay = kDelay});
  HostBuffer host = Host(*backend, kBytes, 0);
  for (int64_t i = 0; i < kRows * kCols; ++i) host.as<float>()[i] = static_cast<float>(i);
  DeviceBuffer slots = Device(*backend, kBytes, kPoison);
  DeviceBuffer out = Device(*backend, kBytes, kPoison);
  std::unique_ptr<CopyEvent> recalled = MakeEvent(*backend);

  const Clock::time_point start = Clock::now();
  const CopyChunk chunk{host.data(), slots.data(), kBytes};
  ASSERT_TRUE(backend->EnqueueCopy({.chunks = {&chunk, 1}}, *recalled).ok());
  EXPECT_LT(Seconds(start), absl::ToDoubleSeconds(kDelay)) << "EnqueueCopy waited for the copy";
  EXPECT_FALSE(Done(*backend, *recalled));

  ASSERT_TRUE(backend->WaitForCopy(*recalled).ok());
  EXPECT_GE(Seconds(start), absl::ToDoubleSeconds(kDelay));
  EXPECT_TRUE(Done(*backend, *recalled));
  // Compute after the wait reads the recalled rows.
  const std::vector<int32_t> rows = {3, 0, 7};
  backend->GatherRows(slots.data(), kCols, rows.data(), 3, out.data());
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      ASSERT_EQ(out.as<float>()[r * kCols + c], static_cast<float>(rows[r] * kCols + c));
    }
  }
}

TEST(CpuCopyTest, EmptyPlansAreMarkersInOrder) {
  constexpr size_t kBytes = 1 << 16;
  auto backend = MakeBackend({.copy_delay = absl::Milliseconds(50)});
  HostBuffer host = Host(*backend, kBytes, 7);
  DeviceBuffer device = Device(*backend, kBytes, kPoison);
  std::unique_ptr<CopyEvent> before = MakeEvent(*backend);
  std::unique_ptr<CopyEvent> copied = MakeEvent(*backend);
  std::unique_ptr<CopyEvent> after = MakeEvent(*backend);
  const CopyChunk chunk{host.data(), device.data(), kBytes};
  ASSERT_TRUE(backend->EnqueueCopy({}, *before).ok());
  ASSERT_TRUE(backend->EnqueueCopy({.chunks = {&chunk, 1}}, *copied).ok());
  ASSERT_TRUE(
      backend->EnqueueCopy({.direction = CopyDirection::kDeviceToHost, .chunks = {}}, *after).ok());
  ASSERT_TRUE(backend->SynchronizeCopy(*after).ok());
  EXPECT_TRUE(Done(*backend, *copied));
  EXPECT_TRUE(AllBytesAre(device.data(), kBytes, 7));
  absl::StatusOr<double> plan_seconds = backend->CopySeconds(*before, *copied);
  ASSERT_TRUE(plan_seconds.ok()) << plan_seconds.status();
  EXPECT_GE(*plan_seconds, 0.049);
  // Markers complete in order, and only copies land late.
  absl::StatusOr<double> marker_seconds = backend->CopySeconds(*copied, *after);
  ASSERT_TRUE(marker_seconds.ok()) << marker_seconds.status();
  EXPECT_GE(*marker_seconds, 0.0);
}

TEST(CpuCopyTest, UnarmedAndPendingEvents) {
  constexpr size_t kBytes = 256;
  auto backend = MakeBackend({.copy_delay = kDelay});
  HostBuffer host = Host(*backend, kBytes, 3);
  DeviceBuffer device = Device(*backend, kBytes, kPoison);
  std::unique_ptr<CopyEvent> unarmed = MakeEvent(*backend);
  std::unique_ptr<CopyEvent> pending = MakeEvent(*backend);
  EXPECT_TRUE(Done(*backend, *unarmed));
  EXPECT_TRUE(backend->WaitForCopy(*unarmed).ok());
  EXPECT_TRUE(backend->SynchronizeCopy(*unarmed).ok());
  // A copy (delayed), then a marker behind it: neither has completed yet.
  const CopyChunk chunk{host.data(), device.data(), kBytes};
  ASSERT_TRUE(backend->EnqueueCopy({.chunks = {&chunk, 1}}, *pending).ok());
  EXPECT_EQ(backend->CopySeconds(*unarmed, *pending).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(backend->EnqueueCopy({}, *unarmed).ok());
  EXPECT_EQ(backend->CopySeconds(*unarmed, *pending).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(backend->SynchronizeCopy(*unarmed).ok());
  // The marker completed behind the copy, itself undelayed.
  absl::StatusOr<double> seconds = backend->CopySeconds(*pending, *unarmed);
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_GE(*seconds, 0.0);
  EXPECT_TRUE(AllBytesAre(device.data(), kBytes, 3));
}

TEST(CpuCopyTest, EventsAreReusable) {
  constexpr size_t kBytes = 256;
  auto backend = MakeBackend();
  HostBuffer host = Host(*backend, kBytes, 0);
  DeviceBuffer device = Device(*backend, kBytes, kPoison);
  std::unique_ptr<CopyEvent> event = MakeEvent(*backend);
  const CopyChunk chunk{host.data(), device.data(), kBytes};
  for (int step = 0; step < 300; ++step) {
    std::memset(host.data(), step % 251, kBytes);
    ASSERT_TRUE(backend->EnqueueCopy({.chunks = {&chunk, 1}}, *event).ok());
    ASSERT_TRUE(backend->WaitForCopy(*event).ok());
    ASSERT_TRUE(AllBytesAre(device.data(), kBytes, step % 251)) << "step " << step;
  }
}

TEST(CpuCopyTest, WriteBackAfterCompute) {
  constexpr int64_t kCols = 32;
  auto backend = MakeBackend();
  DeviceBuffer rows = Device(*backend, 4 * kCols * sizeof(float), 0);
  for (int64_t i = 0; i < 4 * kCols; ++i) rows.as<float>()[i] = static_cast<float>(i);
  DeviceBuffer block = Device(*backend, kCols * sizeof(float), kPoison);
  HostBuffer host = Host(*backend, kCols * sizeof(float), kPoison);
  const int32_t row = 2;
  backend->GatherRows(rows.data(), kCols, &row, 1, block.data());
  std::unique_ptr<CopyEvent> written = MakeEvent(*backend);
  const CopyChunk chunk{block.data(), host.data(), kCols * sizeof(float)};
  ASSERT_TRUE(backend
                  ->EnqueueCopy({.direction = CopyDirection::kDeviceToHost,
                                 .chunks = {&chunk, 1},
                                 .after_compute = true},
                                *written)
                  .ok());
  ASSERT_TRUE(backend->SynchronizeCopy(*written).ok());
  for (int64_t c = 0; c < kCols; ++c) EXPECT_EQ(host.as<float>()[c], 2 * kCols + c);
}

TEST(CpuCopyTest, BadPlansAreRefusedUntouched) {
  constexpr size_t kBytes = 4096;
  auto backend = MakeBackend();
  HostBuffer host = Host(*backend, kBytes, 1);
  DeviceBuffer device = Device(*backend, kBytes, kPoison);
  auto* src = host.as<unsigned char>();
  auto* dst = device.as<unsigned char>();
  const auto wrapping = reinterpret_cast<unsigned char*>(std::numeric_limits<uintptr_t>::max() &
                                                         ~uintptr_t{kCopyAlignment - 1});
  struct Case {
    const char* what;
    std::vector<CopyChunk> chunks;
    CopyDirection direction = CopyDirection::kHostToDevice;
    CopyExecutor executor = CopyExecutor::kAuto;
  };
  const std::vector<Case> cases = {
      {"null source", {{src, dst, 64}, {nullptr, dst + 64, 64}}},
      {"null destination", {{src, nullptr, 64}}},
      {"empty chunk", {{src, dst, 0}}},
      {"size not a multiple of 16", {{src, dst, 40}}},
      {"misaligned source", {{src + 8, dst, 64}}},
      {"misaligned destination", {{src, dst + 4, 64}}},
      {"same destination twice", {{src, dst, 64}, {src + 64, dst + 128, 64}, {src, dst, 64}}},
      {"overlapping destinations", {{src, dst + 256, 128}, {src, dst + 128, 144}}},
      {"destination over another source", {{src, dst, 64}, {dst + 32, dst + 512, 64}}},
      {"destination over its own source", {{dst + 16, dst + 32, 64}}},
      {"past the address space", {{wrapping, dst, 64}}},
      {"invalid direction", {{src, dst, 64}}, static_cast<CopyDirection>(9)},
      {"invalid executor",
       {{src, dst, 64}},
       CopyDirection::kHostToDevice,
       static_cast<CopyExecutor>(9)},
  };
  std::unique_ptr<CopyEvent> event = MakeEvent(*backend);
  for (const Case& c : cases) {
    const CopyPlan plan{.direction = c.direction, .chunks = c.chunks, .executor = c.executor};
    EXPECT_EQ(backend->EnqueueCopy(plan, *event).code(), absl::StatusCode::kInvalidArgument)
        << c.what;
  }
  // Nothing was armed or copied.
  std::unique_ptr<CopyEvent> marker = MakeEvent(*backend);
  ASSERT_TRUE(backend->EnqueueCopy({}, *marker).ok());
  ASSERT_TRUE(backend->SynchronizeCopy(*marker).ok());
  EXPECT_EQ(backend->CopySeconds(*event, *marker).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(AllBytesAre(dst, kBytes, kPoison));
  EXPECT_TRUE(AllBytesAre(src, kBytes, 1));
}

// A plan with the fp8 codec moves whole blocks between the device's form and the host tier's:
// encoded towards the host, decoded towards the device, as the reference codec does; a chunk
// that is not one block, or a layout the codec cannot read, is refused untouched.
TEST(CpuCopyTest, Fp8PlansEncodeAndDecodeWholeBlocks) {
  constexpr PagedKvLayout kLayout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 16};
  const auto block = static_cast<size_t>(kLayout.block_bytes());
  const auto encoded = static_cast<size_t>(HostBlockBytes(kLayout, HostCodec::kFp8E4m3));
  auto backend = MakeBackend();
  DeviceBuffer device = Device(*backend, 2 * block, 0);
  auto* values = device.as<float>();
  for (size_t i = 0; i < 2 * block / sizeof(float); ++i) {
    values[i] = std::sin(static_cast<float>(i)) * static_cast<float>(1 + i % 7);
  }
  HostBuffer host = Host(*backend, 2 * encoded, kPoison);
  auto* host_bytes = host.as<std::byte>();
  auto* device_bytes = device.as<std::byte>();
  std::unique_ptr<CopyEvent> event = MakeEvent(*backend);
  // Runs one plan with the codec to its end.
  const auto copy = [&](CopyDirection direction, const std::vector<CopyChunk>& chunks,
                        const PagedKvLayout& layout) {
    const absl::Status enqueued = backend->EnqueueCopy(
        {.direction = direction, .chunks = chunks, .codec = HostCodec::kFp8E4m3, .layout = layout},
        *event);
    return enqueued.ok() ? backend->SynchronizeCopy(*event) : enqueued;
  };
  ASSERT_TRUE(
      copy(CopyDirection::kDeviceToHost,
           {{device_bytes + block, host_bytes, block}, {device_bytes, host_bytes + encoded, block}},
           kLayout)
          .ok());
  std::vector<std::byte> want(encoded);
  EncodeFp8KvBlock(kLayout, std::span(device_bytes + block, block), want);
  EXPECT_EQ(std::memcmp(host_bytes, want.data(), encoded), 0);

  DeviceBuffer back = Device(*backend, 2 * block, kPoison);
  auto* back_bytes = back.as<std::byte>();
  ASSERT_TRUE(
      copy(CopyDirection::kHostToDevice,
           {{host_bytes, back_bytes + block, block}, {host_bytes + encoded, back_bytes, block}},
           kLayout)
          .ok());
  std::vector<std::byte> decoded(block);
  DecodeFp8KvBlock(kLayout, std::span(host_bytes + encoded, encoded), decoded);
  EXPECT_EQ(std::memcmp(back_bytes, decoded.data(), block), 0);

  DeviceBuffer untouched = Device(*backend, 2 * block, kPoison);
  auto* untouched_bytes = untouched.as<std::byte>();
  EXPECT_EQ(copy(CopyDirection::kHostToDevice, {{host_bytes, untouched_bytes, block / 2}}, kLayout)
                .code(),
            absl::StatusCode::kInvalidArgument);
  PagedKvLayout quantized = kLayout;
  quantized.type = DType::kQ8_0;
  EXPECT_EQ(
      copy(CopyDirection::kHostToDevice, {{host_bytes, untouched_bytes, block}}, quantized).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(AllBytesAre(untouched.data(), 2 * block, kPoison));
}

TEST(CpuCopyTest, EventsOfAnotherBackendAreRefused) {
  auto backend = MakeBackend();
  auto other = MakeBackend();
  std::unique_ptr<CopyEvent> foreign = MakeEvent(*other);
  std::unique_ptr<CopyEvent> own = MakeEvent(*backend);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(backend->EnqueueCopy({}, *foreign).code(), kInvalid);
  EXPECT_EQ(backend->WaitForCopy(*foreign).code(), kInvalid);
  EXPECT_EQ(backend->SynchronizeCopy(*foreign).code(), kInvalid);
  EXPECT_EQ(backend->CopyDone(*foreign).status().code(), kInvalid);
  EXPECT_EQ(backend->CopySeconds(*own, *foreign).status().code(), kInvalid);
}

TEST(CpuCopyTest, DestructionRunsTheQueuedPlans) {
  constexpr size_t kBytes = 1024;
  std::vector<unsigned char> src(kBytes, 5);
  std::vector<unsigned char> dst(kBytes, kPoison);
  {
    auto backend = MakeBackend({.copy_delay = absl::Milliseconds(30)});
    std::unique_ptr<CopyEvent> event = MakeEvent(*backend);
    for (size_t half = 0; half < 2; ++half) {
      const CopyChunk chunk{src.data() + half * kBytes / 2, dst.data() + half * kBytes / 2,
                            kBytes / 2};
      ASSERT_TRUE(backend->EnqueueCopy({.chunks = {&chunk, 1}}, *event).ok());
    }
  }
  EXPECT_EQ(dst, src);
}

TEST(CpuCopyTest, ThreadsEnqueueConcurrently) {
  constexpr int kThreads = 4;
  constexpr int kPlans = 50;
  constexpr size_t kBytes = 512;
  auto backend = MakeBackend();
  HostBuffer host = Host(*backend, kThreads * kPlans * kBytes, 0);
  DeviceBuffer device = Device(*backend, kThreads * kPlans * kBytes, kPoison);
  for (size_t i = 0; i < host.bytes(); ++i) host.as<unsigned char>()[i] = i % 253;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<CopyEvent> event = MakeEvent(*backend);
      for (int p = 0; p < kPlans; ++p) {
        const size_t offset = (t * kPlans + p) * kBytes;
        const CopyChunk chunk{host.as<unsigned char>() + offset,
                              device.as<unsigned char>() + offset, kBytes};
        EXPECT_TRUE(backend->EnqueueCopy({.chunks = {&chunk, 1}}, *event).ok());
      }
      EXPECT_TRUE(backend->SynchronizeCopy(*event).ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(std::memcmp(host.data(), device.data(), host.bytes()), 0);
}

}  // namespace
}  // namespace pulse
