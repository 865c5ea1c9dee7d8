// Random scattered copy plans between a backend's host tier and its device memory, checked byte
// for byte against the same copies made with memcpy. Shared by the CPU and CUDA copy tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "core/backend/backend.h"
#include "gtest/gtest.h"

namespace pulse::testing {

inline constexpr unsigned char kPoison = 0xCD;

inline std::vector<unsigned char> RandomBytes(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> bytes(count);
  for (size_t i = 0; i < count; i += sizeof(uint64_t)) {
    const uint64_t word = rng();
    std::memcpy(bytes.data() + i, &word, std::min(sizeof(word), count - i));
  }
  return bytes;
}

// `count` chunks with sizes drawn from `sizes`: sources at random aligned offsets of
// [src, src + src_bytes) (they may repeat), destinations at random disjoint aligned offsets of
// [dst, dst + dst_bytes). Both regions must hold `count` slots of the largest size plus 64 bytes.
inline std::vector<CopyChunk> RandomChunks(const unsigned char* src, size_t src_bytes,
                                           unsigned char* dst, size_t dst_bytes,
                                           std::span<const size_t> sizes, size_t count,
                                           std::mt19937_64& rng) {
  const size_t slot = *std::max_element(sizes.begin(), sizes.end()) + 4 * kCopyAlignment;
  const size_t src_slots = src_bytes / slot;
  std::vector<size_t> dst_slots(dst_bytes / slot);
  EXPECT_GE(dst_slots.size(), count);
  EXPECT_GE(src_slots, 1u);
  std::iota(dst_slots.begin(), dst_slots.end(), size_t{0});
  std::shuffle(dst_slots.begin(), dst_slots.end(), rng);
  std::vector<CopyChunk> chunks(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t bytes = sizes[rng() % sizes.size()];
    const size_t offsets = (slot - bytes) / kCopyAlignment + 1;
    chunks[i] = {
        .src = src + (rng() % src_slots) * slot + (rng() % offsets) * kCopyAlignment,
        .dst = dst + dst_slots[i] * slot + (rng() % offsets) * kCopyAlignment,
        .bytes = bytes,
    };
  }
  return chunks;
}

// The bytes of a tier that holds `count` chunks of at most the largest of `sizes`, twice over.
inline size_t TierBytes(std::span<const size_t> sizes, size_t count) {
  return 2 * count * (*std::max_element(sizes.begin(), sizes.end()) + 4 * kCopyAlignment);
}

// Runs one random plan of `count` chunks on `backend` and expects the whole destination tier,
// poisoned before, to hold exactly what memcpy of the same chunks gives.
inline void ExpectPlanCopiesExactly(Backend& backend, CopyDirection direction,
                                    CopyExecutor executor, std::span<const size_t> sizes,
                                    size_t count, uint64_t seed) {
  const size_t tier_bytes = TierBytes(sizes, count);
  absl::StatusOr<HostBuffer> host = backend.AllocateHost(tier_bytes);
  ASSERT_TRUE(host.ok()) << host.status();
  absl::StatusOr<DeviceBuffer> device = backend.Allocate(tier_bytes);
  ASSERT_TRUE(device.ok()) << device.status();
  const std::vector<unsigned char> source = RandomBytes(tier_bytes, seed);
  std::vector<unsigned char> expected(tier_bytes, kPoison);
  const bool recall = direction == CopyDirection::kHostToDevice;
  if (recall) {
    std::memcpy(host->data(), source.data(), tier_bytes);
    backend.CopyToDevice(device->data(), expected.data(), tier_bytes);
  } else {
    std::memset(host->data(), kPoison, tier_bytes);
    backend.CopyToDevice(device->data(), source.data(), tier_bytes);
  }
  ASSERT_TRUE(backend.Synchronize().ok());

  auto* src_base = (recall ? host->as<unsigned char>() : device->as<unsigned char>());
  auto* dst_base = (recall ? device->as<unsigned char>() : host->as<unsigned char>());
  std::mt19937_64 rng(seed);
  const std::vector<CopyChunk> chunks =
      RandomChunks(src_base, tier_bytes, dst_base, tier_bytes, sizes, count, rng);
  for (const CopyChunk& chunk : chunks) {
    std::memcpy(expected.data() + (static_cast<unsigned char*>(chunk.dst) - dst_base),
                source.data() + (static_cast<const unsigned char*>(chunk.src) - src_base),
                chunk.bytes);
  }

  absl::StatusOr<std::unique_ptr<CopyEvent>> done = backend.CreateCopyEvent();
  ASSERT_TRUE(done.ok()) << done.status();
  const CopyPlan plan{.direction = direction, .chunks = chunks, .executor = executor};
  ASSERT_TRUE(backend.EnqueueCopy(plan, **done).ok());
  ASSERT_TRUE(backend.SynchronizeCopy(**done).ok());

  std::vector<unsigned char> actual(tier_bytes);
  if (recall) {
    ASSERT_TRUE(backend.CopyToHost(actual.data(), device->data(), tier_bytes).ok());
  } else {
    std::memcpy(actual.data(), host->data(), tier_bytes);
  }
  const auto mismatch = std::mismatch(actual.begin(), actual.end(), expected.begin());
  EXPECT_TRUE(mismatch.first == actual.end())
      << CopyExecutorName(executor) << ": first wrong byte at offset "
      << (mismatch.first - actual.begin()) << " of " << tier_bytes;
}

}  // namespace pulse::testing
