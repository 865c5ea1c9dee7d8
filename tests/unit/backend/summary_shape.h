// The shapes the block-summary tests run: a paged KV layout's head_dim, KV heads and block
// tokens, and the GQA group scored against it.
#pragma once

#include <cstdint>
#include <ostream>

namespace pulse::testing {

struct SummaryShape {
  int32_t head_dim;
  int32_t num_kv_heads;
  int32_t block_tokens;
  int32_t group;  // query heads a KV head
};

// gtest names the parameters with this.
inline void PrintTo(const SummaryShape& shape, std::ostream* os) {
  *os << "d" << shape.head_dim << "_kv" << shape.num_kv_heads << "_block" << shape.block_tokens
      << "_group" << shape.group;
}

}  // namespace pulse::testing
