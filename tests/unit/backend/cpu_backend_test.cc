// The CPU backend's memory, weight upload and copies.
#include "core/backend/cpu/cpu_backend.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"

namespace pulse {
namespace {

using ::pulse::testing::MakeCpuBackend;
using ::pulse::testing::RandomValues;
using ::pulse::testing::RoundToBf16;
using ::testing::HasSubstr;

TEST(CpuBackendTest, RejectsBadThreadCounts) {
  EXPECT_EQ(CreateCpuBackend({.threads = -1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCpuBackend({.threads = 1 << 20}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::shared_ptr<Backend>> backend = CreateCpuBackend({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
}

TEST(CpuBackendTest, AllocationsAreAlignedAndWritable) {
  auto backend = MakeCpuBackend(1);
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{1} << 20}) {
    absl::StatusOr<DeviceBuffer> buffer = backend->Allocate(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_NE(buffer->data(), nullptr);
    EXPECT_EQ(buffer->bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % 64, 0u);
    std::memset(buffer->data(), 0xAB, bytes);
  }
}

TEST(CpuBackendTest, AllocateBeyondTheLimitIsResourceExhausted) {
  auto backend = MakeCpuBackend(1, /*memory_limit=*/4096);
  absl::StatusOr<DeviceBuffer> first = backend->Allocate(3000);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<DeviceBuffer> second = backend->Allocate(2000);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), HasSubstr("2000"));
  EXPECT_THAT(second.status().message(), HasSubstr("4096"));
  EXPECT_THAT(second.status().message(), HasSubstr("3008"));  // in use, rounded to 64 bytes

  *first = DeviceBuffer();  // frees: the budget is back
  absl::StatusOr<DeviceBuffer> third = backend->Allocate(4096);
  EXPECT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(backend->Allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(CpuBackendTest, MovedBuffersFreeOnce) {
  auto backend = MakeCpuBackend(1, /*memory_limit=*/1024);
  absl::StatusOr<DeviceBuffer> a = backend->Allocate(1024);
  ASSERT_TRUE(a.ok());
  DeviceBuffer moved = std::move(*a);
  DeviceBuffer assigned;
  assigned = std::move(moved);
  EXPECT_EQ(backend->Allocate(64).status().code(), absl::StatusCode::kResourceExhausted);
  assigned = DeviceBuffer();
  EXPECT_TRUE(backend->Allocate(1024).ok());
}

TEST(CpuBackendTest, AbsurdAllocationIsAnErrorNotACrash) {
  auto backend = MakeCpuBackend(1);
  EXPECT_EQ(backend->Allocate(std::numeric_limits<size_t>::max()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(backend->Allocate(std::numeric_limits<size_t>::max() - 10).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(CpuBackendTest, UploadWeightF32IsExact) {
  auto backend = MakeCpuBackend(2);
  const std::vector<float> values = RandomValues(5 * 7, 3);
  absl::StatusOr<Weight> weight = backend->UploadWeight(values, 5, 7, DType::kF32);
  ASSERT_TRUE(weight.ok()) << weight.status();
  EXPECT_EQ(weight->rows, 5);
  EXPECT_EQ(weight->cols, 7);
  EXPECT_EQ(weight->type, DType::kF32);
  EXPECT_EQ(std::memcmp(weight->buffer.data(), values.data(), values.size() * sizeof(float)), 0);
}

TEST(CpuBackendTest, UploadWeightBf16RoundsToNearestEven) {
  auto backend = MakeCpuBackend(2);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {
      1.0f,
      std::bit_cast<float>(0x3F808000u),  // tie, even below: rounds down to 0x3F80
      std::bit_cast<float>(0x3F818000u),  // tie, odd below: rounds up to 0x3F82
      std::bit_cast<float>(0x3F808001u),  // above the tie: up
      std::bit_cast<float>(0x3F807FFFu),  // below the tie: down
      -2.5f,
      inf,
      -inf,
      std::bit_cast<float>(0x7F7FFFFFu),  // largest float rounds to +inf
      0.0f,
      -0.0f,
      std::bit_cast<float>(0x00000001u),  // smallest subnormal rounds to +0
  };
  const std::vector<float> random = RandomValues(1000, 4, -1e4f, 1e4f);
  values.insert(values.end(), random.begin(), random.end());
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  values.push_back(std::bit_cast<float>(0x7F800001u));  // signaling NaN with low payload only
  values.push_back(-std::numeric_limits<float>::quiet_NaN());

  const int64_t count = static_cast<int64_t>(values.size());
  absl::StatusOr<Weight> weight = backend->UploadWeight(values, 1, count, DType::kBF16);
  ASSERT_TRUE(weight.ok()) << weight.status();
  EXPECT_EQ(weight->type, DType::kBF16);
  const uint16_t* stored = weight->buffer.as<uint16_t>();
  for (int64_t i = 0; i < count; ++i) {
    const float decoded = std::bit_cast<float>(uint32_t{stored[i]} << 16);
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(decoded)) << "element " << i;
      EXPECT_EQ(std::signbit(decoded), std::signbit(values[i])) << "element " << i;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(decoded), std::bit_cast<uint32_t>(RoundToBf16(values[i])))
          << "element " << i << " value " << values[i];
    }
  }
  EXPECT_EQ(stored[1], 0x3F80);
  EXPECT_EQ(stored[2], 0x3F82);
  EXPECT_EQ(stored[8], 0x7F80);
}

TEST(CpuBackendTest, UploadWeightRejectsBadShapes) {
  auto backend = MakeCpuBackend(1);
  const std::vector<float> values(12, 1.0f);
  EXPECT_EQ(backend->UploadWeight(values, 3, 5, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->UploadWeight(values, -3, -4, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->UploadWeight(values, std::numeric_limits<int64_t>::max(), 2, DType::kBF16)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Weight> empty = backend->UploadWeight({}, 0, 5, DType::kBF16);
  EXPECT_TRUE(empty.ok()) << empty.status();
}

TEST(CpuBackendTest, UploadWeightCountsAgainstTheLimit) {
  auto backend = MakeCpuBackend(1, /*memory_limit=*/1024);
  const std::vector<float> values(512, 1.0f);
  EXPECT_TRUE(backend->UploadWeight(values, 16, 32, DType::kBF16).ok());
  EXPECT_EQ(backend->UploadWeight(values, 16, 32, DType::kF32).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(CpuBackendTest, CopiesRoundTrip) {
  auto backend = MakeCpuBackend(1);
  const std::vector<float> host = RandomValues(100, 5);
  absl::StatusOr<DeviceBuffer> buffer = backend->Allocate(host.size() * sizeof(float));
  ASSERT_TRUE(buffer.ok());
  backend->CopyToDevice(buffer->data(), host.data(), host.size() * sizeof(float));
  std::vector<float> back(host.size());
  ASSERT_TRUE(backend->Synchronize().ok());
  ASSERT_TRUE(backend->CopyToHost(back.data(), buffer->data(), back.size() * sizeof(float)).ok());
  EXPECT_EQ(back, host);
  backend->CopyToDevice(nullptr, nullptr, 0);
  EXPECT_TRUE(backend->CopyToHost(nullptr, nullptr, 0).ok());
}

}  // namespace
}  // namespace pulse
