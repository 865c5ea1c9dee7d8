// Shared helpers of the CPU op tests: seeded random inputs, NaN-poisoned outputs, bf16 rounding
// written independently of the backend's, and backends with a fixed thread count.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace pulse::testing {

inline std::vector<float> RandomValues(size_t count, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

inline std::vector<float> Poisoned(size_t count) {
  return std::vector<float>(count, std::numeric_limits<float>::quiet_NaN());
}

// Round to nearest, ties to even, by inspecting the dropped half.
inline float RoundToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t kept = bits & 0xFFFF0000u;
  const uint32_t dropped = bits & 0xFFFFu;
  const bool odd = (kept >> 16) & 1;
  const uint32_t rounded =
      (dropped > 0x8000u || (dropped == 0x8000u && odd)) ? kept + 0x10000u : kept;
  return std::bit_cast<float>(rounded);
}

inline std::vector<float> RoundToBf16(std::vector<float> values) {
  for (float& v : values) v = RoundToBf16(v);
  return values;
}

// `values` copied into a new buffer of `backend`'s memory.
template <typename T>
DeviceBuffer UploadVector(Backend& backend, const std::vector<T>& values) {
  absl::StatusOr<DeviceBuffer> buffer =
      backend.Allocate(std::max<size_t>(values.size(), 1) * sizeof(T));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  backend.CopyToDevice(buffer->data(), values.data(), values.size() * sizeof(T));
  return *std::move(buffer);
}

// The first `count` values of `buffer`, read back from `backend`'s memory.
template <typename T>
std::vector<T> DownloadVector(Backend& backend, const DeviceBuffer& buffer, size_t count) {
  std::vector<T> values(count);
  const absl::Status status = backend.CopyToHost(values.data(), buffer.data(), count * sizeof(T));
  EXPECT_TRUE(status.ok()) << status;
  return values;
}

inline std::shared_ptr<Backend> MakeCpuBackend(int32_t threads, size_t memory_limit = 0) {
  CpuBackendOptions options;
  options.threads = threads;
  options.memory_limit_bytes = memory_limit;
  absl::StatusOr<std::shared_ptr<Backend>> backend = CreateCpuBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *backend;
}

// `kv` with its host counts (num_rows, max_q_len, max_kv_len) filled from its arrays, which must
// be in host memory.
inline PagedKvBatch WithHostCounts(PagedKvBatch kv) {
  kv.num_rows = kv.q_offsets[kv.num_seqs];
  kv.max_q_len = 0;
  kv.max_kv_len = 0;
  for (int32_t s = 0; s < kv.num_seqs; ++s) {
    kv.max_q_len = std::max(kv.max_q_len, kv.q_offsets[s + 1] - kv.q_offsets[s]);
    kv.max_kv_len = std::max(kv.max_kv_len, kv.kv_lens[s]);
  }
  return kv;
}

inline bool BitwiseEqual(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// Expects actual[i] == expected[i] bit for bit.
inline void ExpectBitwiseEqual(const float* actual, const float* expected, size_t count) {
  size_t mismatches = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!BitwiseEqual(actual[i], expected[i]) && mismatches++ < 5) {
      ADD_FAILURE() << "element " << i << ": " << actual[i] << " != " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace pulse::testing

namespace pulse {
// gtest prints parameters with this.
inline void PrintTo(DType type, std::ostream* os) { *os << DTypeName(type); }
}  // namespace pulse
