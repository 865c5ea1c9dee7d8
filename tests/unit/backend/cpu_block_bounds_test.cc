// The CPU backend's ScoreBlocks at every instruction-set level this CPU runs against the
// reference's GroupBounds, bit for bit (the kernels run the reference's sums lane by lane), for
// every precision, one and two rows a box, one box, two and one a token, both ways of combining
// boxes, and GQA groups of 1 to 8 (the kernels score four query heads at a time). The shapes
// include blocks of 4 and 8 tokens (several candidates a vector of lanes), of 32 (one candidate
// over two vectors), and head_dims whose int4 or int8 rows are not whole 4-byte words (those go
// to the reference itself). Candidates come in runs of one query row with strays between them;
// the query rows' padding is NaN, so a read outside a row's heads shows.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "core/backend/block_estimator.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/cpu_level.h"
#include "core/backend/reference/block_summary.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"
#include "tests/unit/backend/summary_shape.h"

namespace pulse {
namespace {

using cpu::CpuLevel;
using ::pulse::testing::ExpectBitwiseEqual;
using ::pulse::testing::Poisoned;
using ::pulse::testing::RandomValues;

using Shape = ::pulse::testing::SummaryShape;

std::vector<BlockEstimator> Estimators() {
  std::vector<BlockEstimator> estimators;
  for (const SummaryPrecision precision : {SummaryPrecision::kF32, SummaryPrecision::kBf16,
                                           SummaryPrecision::kInt8, SummaryPrecision::kInt4}) {
    for (const float radius : {0.0f, 0.5f}) {
      for (const int32_t boxes : {1, 2, 0}) {
        for (const BoxCombine combine : {BoxCombine::kMax, BoxCombine::kLogSumExp}) {
          estimators.push_back(
              {.boxes = boxes, .radius = radius, .precision = precision, .combine = combine});
        }
      }
    }
  }
  return estimators;
}

class CpuBlockBoundsTest : public ::testing::TestWithParam<Shape> {};

TEST_P(CpuBlockBoundsTest, EveryLevelGivesTheReferenceBits) {
  const Shape shape = GetParam();
  const PagedKvLayout layout = {.block_tokens = shape.block_tokens,
                                .num_kv_heads = shape.num_kv_heads,
                                .head_dim = shape.head_dim,
                                .type = DType::kF32};
  const int32_t num_heads = shape.num_kv_heads * shape.group;
  constexpr int32_t kSlots = 13;
  constexpr int32_t kRows = 4;
  constexpr int32_t kCount = 97;

  // Random keys a block; block 4 has a channel of NaN keys (every box's bound NaN), block 5 one
  // in its first tokens only (some boxes' bounds NaN, with a box a token), block 7 equal keys.
  std::vector<float> blocks = RandomValues(static_cast<size_t>(kSlots * layout.block_elems()), 1);
  const auto key = [&](int32_t b, int32_t h, int32_t t, int32_t d) -> float& {
    return blocks[static_cast<size_t>(b * layout.block_elems() + h * layout.head_elems() +
                                      int64_t{t} * layout.head_dim + d)];
  };
  for (int32_t t = 0; t < layout.block_tokens; ++t) {
    key(4, 0, t, 1) = std::numeric_limits<float>::quiet_NaN();
    if (t < std::max(1, layout.block_tokens / 2)) {
      key(5, layout.num_kv_heads - 1, t, 0) = std::numeric_limits<float>::quiet_NaN();
    }
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      for (int32_t d = 0; d < layout.head_dim; ++d) key(7, h, t, d) = key(7, h, 0, d);
    }
  }

  std::mt19937 rng(2);
  std::vector<int32_t> summary_ids(kCount);
  for (int32_t& id : summary_ids) id = static_cast<int32_t>(rng() % kSlots);
  const int32_t row_order[kRows] = {2, 0, 3, 1};
  std::vector<int32_t> query_rows(kCount);
  for (int32_t i = 0; i < kCount; ++i) {
    query_rows[i] =
        i % 11 == 5 ? static_cast<int32_t>(rng() % kRows) : row_order[i * kRows / kCount];
  }
  const int64_t q_stride = int64_t{num_heads} * layout.head_dim + 3;
  std::vector<float> q = Poisoned(static_cast<size_t>(kRows * q_stride));
  const std::vector<float> values = RandomValues(q.size(), 3);
  for (int64_t r = 0; r < kRows; ++r) {
    std::copy_n(values.begin() + r * q_stride, q_stride - 3, q.begin() + r * q_stride);
  }

  for (const BlockEstimator& estimator : Estimators()) {
    SCOPED_TRACE(EstimatorName(estimator, layout.block_tokens));
    const BlockEstimator resolved = ForBlocks(estimator, layout.block_tokens);
    const auto bytes = static_cast<size_t>(SummaryBytes(layout, resolved));
    std::vector<std::byte> summaries(kSlots * bytes);
    for (int32_t b = 0; b < kSlots; ++b) {
      ASSERT_TRUE(reference::SummarizeBlock(
                      layout, resolved,
                      std::span<const float>(blocks).subspan(
                          static_cast<size_t>(b * layout.block_elems()), layout.block_elems()),
                      layout.block_tokens, std::span(summaries).subspan(b * bytes, bytes))
                      .ok());
    }
    std::vector<float> expected(static_cast<size_t>(num_heads) * kCount);
    for (int32_t i = 0; i < kCount; ++i) {
      for (int32_t kv_head = 0; kv_head < layout.num_kv_heads; ++kv_head) {
        const int32_t first = kv_head * shape.group;
        reference::GroupBounds(
            layout, resolved,
            q.data() + query_rows[i] * q_stride + int64_t{first} * layout.head_dim, shape.group,
            std::span(summaries).subspan(summary_ids[i] * bytes, bytes), kv_head,
            expected.data() + int64_t{first} * kCount + i, kCount);
      }
    }
    for (const CpuLevel level : {CpuLevel::kGeneric, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
      if (!cpu::CpuLevelSupported(level)) continue;
      SCOPED_TRACE(cpu::CpuLevelName(level));
      absl::StatusOr<std::shared_ptr<Backend>> backend =
          CreateCpuBackend({.threads = 2, .kernel_level = level});
      ASSERT_TRUE(backend.ok()) << backend.status();
      std::vector<float> bounds = Poisoned(expected.size());
      (*backend)->ScoreBlocks(q.data(), q_stride, num_heads, layout, estimator, summaries.data(),
                              summary_ids.data(), query_rows.data(), kCount, bounds.data());
      ASSERT_TRUE((*backend)->Synchronize().ok());
      ExpectBitwiseEqual(bounds.data(), expected.data(), expected.size());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuBlockBoundsTest,
                         ::testing::Values(Shape{64, 3, 8, 3}, Shape{64, 3, 4, 3},
                                           Shape{128, 2, 16, 4}, Shape{64, 1, 32, 5},
                                           Shape{24, 2, 8, 8}, Shape{20, 1, 8, 2},
                                           Shape{6, 2, 4, 1}));

}  // namespace
}  // namespace pulse
