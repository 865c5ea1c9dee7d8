// Comparing the logits of decode steps bit for bit (the CPU backend, and offloaded against
// resident attention, promise identical results).
#pragma once

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace pulse::testing {

// a[i] and b[i] are one step's logits each; they must be the same bits, step by step.
inline void ExpectBitwiseEqual(const std::vector<std::vector<float>>& a,
                               const std::vector<std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << "step " << i;
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0)
        << "step " << i;
  }
}

}  // namespace pulse::testing
