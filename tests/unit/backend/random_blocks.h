// Random weights in ggml's blocks for the CPU backend's tests and benchmark: random integers and
// scales (halves) of about 2^-8, or, with `extremes`, every seventh block's scales from subnormal
// to large halves (and zero) and Q8_0's -128. (Q4_K's 6-bit scales and minima and Q6_K's int8
// scales are random bytes: zero, 63 and -128 among them.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/backend/dtype.h"

namespace pulse::testing {

// Byte offsets of a block's halves: its scale, and its minimum's scale where it has one.
inline std::vector<int64_t> HalfOffsets(DType type) {
  switch (type) {
    case DType::kQ4_1:
    case DType::kQ4_K:
      return {0, 2};
    case DType::kQ6_K:
      return {kQ6_KBlockBytes - 2};
    default:
      return {0};
  }
}

inline std::vector<std::byte> RandomBlocks(DType type, int64_t rows, int64_t cols, uint32_t seed,
                                           bool extremes) {
  std::mt19937 rng(seed);
  const int64_t blocks = rows * cols / BlockTypeValues(type);
  const int64_t block_bytes = BlockTypeBytes(type);
  std::vector<std::byte> bytes(static_cast<size_t>(blocks * block_bytes));
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng());
  const uint16_t scales[] = {0x0001, 0x03FF, 0x0000, 0x1C00, 0x2E66, 0x3C00, 0x5640, 0x8C00};
  for (int64_t i = 0; i < blocks; ++i) {
    std::byte* block = &bytes[static_cast<size_t>(i * block_bytes)];
    const bool extreme = extremes && i % 7 == 0;
    for (const int64_t offset : HalfOffsets(type)) {
      const uint16_t bits =
          extreme ? scales[rng() % 8] : static_cast<uint16_t>(0x1C00 | (rng() & 0x3FF));
      std::memcpy(block + offset, &bits, 2);
    }
    if (extremes && type == DType::kQ8_0 && i % 5 == 0) block[2] = std::byte{0x80};  // -128
  }
  return bytes;
}

}  // namespace pulse::testing
