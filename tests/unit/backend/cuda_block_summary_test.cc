// The CUDA backend's Quest block-summary ops against the CPU reference functions of
// core/backend/reference/block_summary.h, for every precision and row count of the compact store.
// SummarizeBlocks over random bf16 caches (negative keys, whole channels below zero, NaN keys, a
// channel of NaN keys, NaN values that must not be read) must store the reference's summaries
// exactly: the minimum or maximum of bf16 values is exact in fp32, and the shrink, the bf16
// rounding and the int8 and int4 quantization are the same fp32 operations. ScoreBlocks must give
// the reference's bounds within fp32 rounding of another summation order, over query rows whose
// stride padding is NaN (a read outside a row's heads shows). The shapes cover head_dim 64 and
// 128, 1, 2 and 8 KV heads, 4-, 8-, 16- and 32-token blocks and GQA groups 1, 3, 4 and 8, plus
// head_dim 256, 96, 80 and 20 for the kernels' other paths; query strides a multiple of 4 (vector
// loads) and not (scalar loads). Skipped without a CUDA device.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "core/backend/bf16.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/backend/reference/block_summary.h"
#include "core/backend/summary_int.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"
#include "tests/unit/backend/summary_shape.h"

namespace pulse {
namespace {

using ::pulse::testing::Poisoned;
using ::pulse::testing::RandomValues;

constexpr uint16_t kBf16NaN = 0x7FC0;
// Written into the bytes of summary slots that no block is summarized into: they must keep it.
constexpr std::byte kUntouched{0xA5};
// Quest's page summary: one box a block, the whole range.
constexpr BlockEstimator kQuest{.boxes = 1, .radius = 1.0f};

// The estimators the kernels must reproduce on `layout`, besides Quest's: boxes shrunk to their
// centers (one row a box) or part way, smaller boxes, every key, and rows stored in bf16, int8 and
// int4 with one and two rows a box, boxes merged by their largest and by log-sum-exp.
std::vector<BlockEstimator> Estimators(const PagedKvLayout& layout) {
  return {{.radius = 0.0f},
          {.radius = 0.375f},
          {.boxes = 2, .radius = 1.0f},
          {.boxes = layout.block_tokens, .radius = 0.0f, .precision = SummaryPrecision::kBf16},
          {.boxes = 2, .radius = 0.5f, .precision = SummaryPrecision::kBf16},
          {.boxes = 4, .radius = 0.0f, .precision = SummaryPrecision::kInt8},
          {.radius = 1.0f, .precision = SummaryPrecision::kInt8},
          {.boxes = layout.block_tokens, .radius = 0.0f, .precision = SummaryPrecision::kInt4},
          {.boxes = 2, .radius = 0.5f, .precision = SummaryPrecision::kInt4},
          // Four rows a candidate: the tensor-core kernel's paired groups at every block size.
          {.boxes = 4, .radius = 0.0f, .precision = SummaryPrecision::kInt4},
          {.boxes = layout.block_tokens,
           .radius = 0.0f,
           .precision = SummaryPrecision::kInt4,
           .combine = BoxCombine::kLogSumExp},
          {.boxes = 2,
           .radius = 0.5f,
           .precision = SummaryPrecision::kBf16,
           .combine = BoxCombine::kLogSumExp}};
}

// Bounds may differ from the reference by fp32 rounding of another summation order (and FMA).
constexpr double kBoundTolerance = 1e-5;

using Shape = ::pulse::testing::SummaryShape;

PagedKvLayout Layout(const Shape& shape, DType type) {
  return {.block_tokens = shape.block_tokens,
          .num_kv_heads = shape.num_kv_heads,
          .head_dim = shape.head_dim,
          .type = type};
}

// Equal values, or both NaN (the sign of a zero may differ: fminf(-0, +0) may be either).
bool SameValue(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// A paged cache of `blocks` blocks as bf16 bits: random keys with a per-channel offset (channels
// d % 7 == 0 hold only negative keys), NaN in every value.
std::vector<uint16_t> RandomCache(const PagedKvLayout& layout, int32_t blocks, uint32_t seed) {
  const std::vector<float> noise =
      RandomValues(static_cast<size_t>(blocks * layout.block_elems()), seed);
  std::vector<uint16_t> bits(noise.size(), kBf16NaN);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t k = 0; k < layout.value_offset(); ++k) {
      const int64_t at = b * layout.block_elems() + k;
      const int32_t d = static_cast<int32_t>(k % layout.head_dim);
      bits[at] = F32ToBf16(noise[at] + 0.5f * static_cast<float>(d % 7 - 3));
    }
  }
  return bits;
}

// Key bits of channel d of token t of KV head h of block b.
uint16_t& KeyBits(const PagedKvLayout& layout, std::vector<uint16_t>& cache, int32_t b, int32_t h,
                  int32_t t, int32_t d) {
  return cache[static_cast<size_t>(b * layout.block_elems() + h * layout.head_elems() +
                                   int64_t{t} * layout.head_dim + d)];
}

// The first `count` of a seeded permutation of [0, n).
std::vector<int32_t> DistinctIds(int32_t n, int32_t count, uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(static_cast<size_t>(count));
  return ids;
}

PagedKvLayout F32(PagedKvLayout layout) {
  layout.type = DType::kF32;
  return layout;
}

template <typename T>
T Load(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

// Value k of the int4 values packed from `summary` on.
int8_t Int4At(const std::byte* summary, size_t k) {
  const auto packed = Load<uint8_t>(summary + k / 2);
  return k % 2 == 0 ? LowInt4(packed) : HighInt4(packed);
}

// Every number stored in `summaries` (summaries of `layout` under `estimator`, back to back) in
// fp32, in order: each summary's row values (integer ones as the integers), then at int8 and int4
// its rows' scales.
std::vector<float> StoredNumbers(const PagedKvLayout& layout, const BlockEstimator& estimator,
                                 const std::vector<std::byte>& summaries) {
  const auto bytes = static_cast<size_t>(SummaryBytes(layout, estimator));
  const size_t rows = static_cast<size_t>(layout.num_kv_heads) * estimator.boxes *
                      static_cast<size_t>(SummaryBoxRows(estimator));
  const size_t values = rows * static_cast<size_t>(layout.head_dim);
  std::vector<float> numbers;
  for (size_t at = 0; at + bytes <= summaries.size(); at += bytes) {
    const std::byte* summary = summaries.data() + at;
    for (size_t k = 0; k < values; ++k) {
      switch (estimator.precision) {
        case SummaryPrecision::kF32:
          numbers.push_back(Load<float>(summary + 4 * k));
          break;
        case SummaryPrecision::kBf16:
          numbers.push_back(Bf16ToF32(Load<uint16_t>(summary + 2 * k)));
          break;
        case SummaryPrecision::kInt8:
          numbers.push_back(static_cast<float>(Load<int8_t>(summary + k)));
          break;
        case SummaryPrecision::kInt4:
          numbers.push_back(static_cast<float>(Int4At(summary, k)));
          break;
      }
    }
    const size_t value_bytes = estimator.precision == SummaryPrecision::kInt4 ? values / 2 : values;
    if (estimator.precision == SummaryPrecision::kInt8 ||
        estimator.precision == SummaryPrecision::kInt4) {
      for (size_t r = 0; r < rows; ++r) {
        numbers.push_back(Load<float>(summary + value_bytes + 4 * r));
      }
    }
  }
  return numbers;
}

// Row r's values of one stored summary as read in fp32 (integer ones times their scale).
std::vector<float> ReadRow(const PagedKvLayout& layout, const BlockEstimator& estimator,
                           const std::byte* summary, size_t r) {
  const auto dim = static_cast<size_t>(layout.head_dim);
  const size_t rows = static_cast<size_t>(layout.num_kv_heads) * estimator.boxes *
                      static_cast<size_t>(SummaryBoxRows(estimator));
  std::vector<float> row(dim);
  for (size_t d = 0; d < dim; ++d) {
    const size_t k = r * dim + d;
    switch (estimator.precision) {
      case SummaryPrecision::kF32:
        row[d] = Load<float>(summary + 4 * k);
        break;
      case SummaryPrecision::kBf16:
        row[d] = Bf16ToF32(Load<uint16_t>(summary + 2 * k));
        break;
      case SummaryPrecision::kInt8:
        row[d] = static_cast<float>(Load<int8_t>(summary + k)) *
                 Load<float>(summary + rows * dim + 4 * r);
        break;
      case SummaryPrecision::kInt4:
        row[d] =
            static_cast<float>(Int4At(summary, k)) * Load<float>(summary + rows * dim / 2 + 4 * r);
        break;
    }
  }
  return row;
}

// What the CPU reference stores for SummarizeBlocks into `slots` summaries (kUntouched
// elsewhere); `cache` holds bf16 bits, read in fp32 (exactly).
std::vector<std::byte> ReferenceSummaries(const PagedKvLayout& layout,
                                          const std::vector<uint16_t>& cache,
                                          const std::vector<int32_t>& block_ids,
                                          const std::vector<int32_t>& summary_ids, int32_t slots,
                                          const BlockEstimator& estimator = kQuest) {
  const PagedKvLayout f32 = F32(layout);
  const auto bytes = static_cast<size_t>(SummaryBytes(f32, estimator));
  std::vector<std::byte> summaries(slots * bytes, kUntouched);
  std::vector<float> block(static_cast<size_t>(f32.block_elems()));
  for (size_t i = 0; i < block_ids.size(); ++i) {
    const uint16_t* bits = cache.data() + block_ids[i] * f32.block_elems();
    std::transform(bits, bits + block.size(), block.begin(), Bf16ToF32);
    const absl::Status status = reference::SummarizeBlock(
        f32, estimator, block, f32.block_tokens,
        std::span(summaries).subspan(static_cast<size_t>(summary_ids[i]) * bytes, bytes));
    EXPECT_TRUE(status.ok()) << status;
  }
  return summaries;
}

// The CPU reference's bounds [num_heads][count], and the magnitude of each (the largest over the
// boxes of the sum over d of |q[d]| * max(|min[d]|, |max[d]|), the rows as read) for the rounding
// allowance.
struct ReferenceBounds {
  std::vector<float> bounds;
  std::vector<double> magnitudes;
};

ReferenceBounds ScoreOnCpu(const std::vector<float>& q, int64_t q_stride, int32_t num_heads,
                           const PagedKvLayout& layout, const BlockEstimator& estimator,
                           const std::vector<std::byte>& summaries,
                           const std::vector<int32_t>& summary_ids,
                           const std::vector<int32_t>& query_rows) {
  const PagedKvLayout f32 = F32(layout);
  const size_t count = summary_ids.size();
  const size_t dim = static_cast<size_t>(layout.head_dim);
  const size_t group = static_cast<size_t>(num_heads / layout.num_kv_heads);
  const auto bytes = static_cast<size_t>(SummaryBytes(f32, estimator));
  const auto box_rows = static_cast<size_t>(SummaryBoxRows(estimator));
  ReferenceBounds out{std::vector<float>(num_heads * count),
                      std::vector<double>(num_heads * count)};
  std::vector<float> bounds(static_cast<size_t>(num_heads));
  for (size_t i = 0; i < count; ++i) {
    const std::span<const float> row(q.data() + query_rows[i] * q_stride, num_heads * dim);
    const absl::Status status = reference::ScoreBlocks(
        f32, estimator, row, summaries, std::span<const int32_t>(&summary_ids[i], 1), bounds);
    EXPECT_TRUE(status.ok()) << status;
    const std::byte* summary = summaries.data() + summary_ids[i] * bytes;
    for (size_t h = 0; h < static_cast<size_t>(num_heads); ++h) {
      double magnitude = 0.0;
      for (size_t box = 0; box < static_cast<size_t>(estimator.boxes); ++box) {
        const size_t first_row = ((h / group) * estimator.boxes + box) * box_rows;
        const std::vector<float> lo = ReadRow(f32, estimator, summary, first_row);
        const std::vector<float> hi = ReadRow(f32, estimator, summary, first_row + box_rows - 1);
        double box_magnitude = 0.0;
        for (size_t d = 0; d < dim; ++d) {
          box_magnitude += std::abs(double{row[h * dim + d]}) *
                           std::max(std::abs(double{lo[d]}), std::abs(double{hi[d]}));
        }
        magnitude = std::max(magnitude, box_magnitude);
      }
      out.bounds[h * count + i] = bounds[h];
      out.magnitudes[h * count + i] = magnitude;
    }
  }
  return out;
}

class CudaBlockSummaryFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::shared_ptr<Backend>> cuda = CreateCudaBackend({});
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    cuda_ = *cuda;
  }

  template <typename T>
  DeviceBuffer Upload(const std::vector<T>& values) {
    absl::StatusOr<DeviceBuffer> buffer = cuda_->Allocate(values.size() * sizeof(T));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    cuda_->CopyToDevice(buffer->data(), values.data(), values.size() * sizeof(T));
    return *std::move(buffer);
  }

  template <typename T = float>
  std::vector<T> Download(const DeviceBuffer& buffer, size_t count) {
    std::vector<T> values(count);
    const absl::Status status = cuda_->CopyToHost(values.data(), buffer.data(), count * sizeof(T));
    EXPECT_TRUE(status.ok()) << status;
    return values;
  }

  // SummarizeBlocks on the device into `slots` summaries first holding kUntouched.
  std::vector<std::byte> Summarize(const PagedKvLayout& layout, const std::vector<uint16_t>& cache,
                                   const std::vector<int32_t>& block_ids,
                                   const std::vector<int32_t>& summary_ids, int32_t slots,
                                   const BlockEstimator& estimator = kQuest) {
    const size_t bytes = static_cast<size_t>(slots * SummaryBytes(layout, estimator));
    DeviceBuffer blocks = Upload(cache);
    DeviceBuffer block_id_buffer = Upload(block_ids);
    DeviceBuffer summary_id_buffer = Upload(summary_ids);
    DeviceBuffer summaries = Upload(std::vector<std::byte>(bytes, kUntouched));
    cuda_->SummarizeBlocks(blocks.data(), layout, estimator, block_id_buffer.as<int32_t>(),
                           summary_id_buffer.as<int32_t>(), static_cast<int32_t>(block_ids.size()),
                           summaries.data());
    return Download<std::byte>(summaries, bytes);
  }

  // ScoreBlocks on the device into bounds first holding NaN.
  std::vector<float> Score(const std::vector<float>& q, int64_t q_stride, int32_t num_heads,
                           const PagedKvLayout& layout, const BlockEstimator& estimator,
                           const std::vector<std::byte>& summaries,
                           const std::vector<int32_t>& summary_ids,
                           const std::vector<int32_t>& query_rows) {
    const size_t floats = static_cast<size_t>(num_heads) * summary_ids.size();
    DeviceBuffer q_buffer = Upload(q);
    DeviceBuffer summary_buffer = Upload(summaries);
    DeviceBuffer id_buffer = Upload(summary_ids);
    DeviceBuffer row_buffer = Upload(query_rows);
    DeviceBuffer bounds = Upload(Poisoned(floats));
    cuda_->ScoreBlocks(q_buffer.as<float>(), q_stride, num_heads, layout, estimator,
                       summary_buffer.data(), id_buffer.as<int32_t>(), row_buffer.as<int32_t>(),
                       static_cast<int32_t>(summary_ids.size()), bounds.as<float>());
    return Download(bounds, floats);
  }

  // The same stored numbers (values and scales), or both NaN (the sign of a zero may differ:
  // fminf(-0, +0) may be either).
  static void ExpectSameSummaries(const PagedKvLayout& layout, const BlockEstimator& estimator,
                                  const std::vector<std::byte>& actual,
                                  const std::vector<std::byte>& expected) {
    ASSERT_EQ(actual.size(), expected.size());
    const std::vector<float> actual_numbers = StoredNumbers(layout, estimator, actual);
    const std::vector<float> expected_numbers = StoredNumbers(layout, estimator, expected);
    size_t mismatches = 0;
    for (size_t k = 0; k < actual_numbers.size(); ++k) {
      if (!SameValue(actual_numbers[k], expected_numbers[k]) && mismatches++ < 5) {
        ADD_FAILURE() << "stored number " << k << ": " << actual_numbers[k]
                      << " != " << expected_numbers[k];
      }
    }
    EXPECT_EQ(mismatches, 0u);
  }

  static void ExpectCloseBounds(const std::vector<float>& actual, const ReferenceBounds& expected) {
    ASSERT_EQ(actual.size(), expected.bounds.size());
    size_t mismatches = 0;
    for (size_t k = 0; k < actual.size(); ++k) {
      const float want = expected.bounds[k];
      const bool ok = std::isnan(want) ? std::isnan(actual[k])
                                       : std::isfinite(actual[k]) &&
                                             std::abs(double{actual[k]} - want) <=
                                                 kBoundTolerance * expected.magnitudes[k] + 1e-30;
      if (!ok && mismatches++ < 5) {
        ADD_FAILURE() << "bound " << k << ": " << actual[k] << " != " << want << " (magnitude "
                      << expected.magnitudes[k] << ")";
      }
    }
    EXPECT_EQ(mismatches, 0u);
  }

  std::shared_ptr<Backend> cuda_;
};

class CudaBlockSummaryTest : public CudaBlockSummaryFixture,
                             public ::testing::WithParamInterface<Shape> {};

TEST_P(CudaBlockSummaryTest, SummarizeBlocksMatchesTheReferenceExactly) {
  const PagedKvLayout layout = Layout(GetParam(), DType::kBF16);
  constexpr int32_t kBlocks = 23;
  constexpr int32_t kCount = 13;
  constexpr int32_t kSlots = 19;
  std::vector<uint16_t> cache = RandomCache(layout, kBlocks, 1);
  const std::vector<int32_t> block_ids = DistinctIds(kBlocks, kCount, 2);
  const std::vector<int32_t> summary_ids = DistinctIds(kSlots, kCount, 3);
  // NaN keys, skipped: the first and last tokens of one channel of one block, and one whole
  // channel of another, whose minimum and maximum are then NaN.
  const int32_t channel = std::min(3, layout.head_dim - 1);
  KeyBits(layout, cache, block_ids[0], 0, 0, channel) = kBf16NaN;
  KeyBits(layout, cache, block_ids[0], 0, layout.block_tokens - 1, channel) = kBf16NaN;
  const int32_t last_head = layout.num_kv_heads - 1;
  for (int32_t t = 0; t < layout.block_tokens; ++t) {
    KeyBits(layout, cache, block_ids[1], last_head, t, layout.head_dim - 1) = kBf16NaN;
  }

  const std::vector<std::byte> expected =
      ReferenceSummaries(layout, cache, block_ids, summary_ids, kSlots);
  const std::vector<float> floats = StoredNumbers(layout, kQuest, expected);
  const int64_t floats_a_summary = SummaryBytes(layout, kQuest) / 4;
  ASSERT_FALSE(std::isnan(floats[summary_ids[0] * floats_a_summary + channel]));
  ASSERT_TRUE(std::isnan(floats[summary_ids[1] * floats_a_summary +
                                (2 * last_head + 1) * layout.head_dim + layout.head_dim - 1]));
  ExpectSameSummaries(layout, kQuest, Summarize(layout, cache, block_ids, summary_ids, kSlots),
                      expected);
  // Boxes shrunk around their midpoints (their centers alone at radius 0), boxes of fewer
  // tokens, rows stored in bf16, int8 or int4, the same numbers as the reference stores.
  for (const BlockEstimator& estimator : Estimators(layout)) {
    SCOPED_TRACE(EstimatorName(estimator, layout.block_tokens));
    ExpectSameSummaries(
        layout, estimator, Summarize(layout, cache, block_ids, summary_ids, kSlots, estimator),
        ReferenceSummaries(layout, cache, block_ids, summary_ids, kSlots, estimator));
  }
}

TEST_P(CudaBlockSummaryTest, ScoreBlocksMatchesTheReference) {
  const Shape shape = GetParam();
  const PagedKvLayout layout = Layout(shape, DType::kBF16);
  const int32_t num_heads = shape.num_kv_heads * shape.group;
  constexpr int32_t kRows = 5;
  constexpr int32_t kSlots = 19;
  constexpr int32_t kCount = 300;  // over several tiles of candidates, not a multiple of one

  // The summaries of random blocks, one with a channel of NaN keys (a NaN bound at every
  // precision), one whose keys are all equal (min == max).
  std::vector<uint16_t> cache = RandomCache(layout, kSlots, 4);
  for (int32_t t = 0; t < layout.block_tokens; ++t) {
    KeyBits(layout, cache, 4, 0, t, 1 % layout.head_dim) = kBf16NaN;
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      for (int32_t d = 0; d < layout.head_dim; ++d) {
        KeyBits(layout, cache, 7, h, t, d) = KeyBits(layout, cache, 7, h, 0, d);
      }
    }
  }
  std::vector<int32_t> slots(kSlots);
  std::iota(slots.begin(), slots.end(), 0);

  std::mt19937 rng(6);
  std::vector<int32_t> summary_ids(kCount);
  for (int32_t& id : summary_ids) id = static_cast<int32_t>(rng() % kSlots);
  // Runs of candidates a row, the rows out of order, and a few strays.
  const int32_t row_order[kRows] = {3, 0, 4, 1, 2};
  std::vector<int32_t> query_rows(kCount);
  for (int32_t i = 0; i < kCount; ++i) {
    query_rows[i] =
        i % 17 == 5 ? static_cast<int32_t>(rng() % kRows) : row_order[i * kRows / kCount];
  }

  std::vector<BlockEstimator> estimators = Estimators(layout);
  estimators.push_back(kQuest);
  estimators.push_back({.boxes = 4, .radius = 1.0f});
  for (const BlockEstimator& estimator : estimators) {
    SCOPED_TRACE(EstimatorName(estimator, layout.block_tokens));
    const std::vector<std::byte> summaries =
        ReferenceSummaries(layout, cache, slots, slots, kSlots, estimator);
    for (const int64_t padding : {8, 3}) {  // float4 loads of q, then scalar loads
      SCOPED_TRACE(::testing::Message() << "q padding " << padding);
      const int64_t q_stride = int64_t{num_heads} * layout.head_dim + padding;
      std::vector<float> q = Poisoned(static_cast<size_t>(kRows * q_stride));
      const std::vector<float> values = RandomValues(q.size(), 7);
      for (int64_t r = 0; r < kRows; ++r) {
        std::copy_n(values.begin() + r * q_stride, q_stride - padding, q.begin() + r * q_stride);
      }
      ExpectCloseBounds(
          Score(q, q_stride, num_heads, layout, estimator, summaries, summary_ids, query_rows),
          ScoreOnCpu(q, q_stride, num_heads, layout, estimator, summaries, summary_ids,
                     query_rows));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CudaBlockSummaryTest,
    ::testing::Values(Shape{64, 1, 16, 1}, Shape{64, 2, 32, 4}, Shape{64, 8, 16, 8},
                      Shape{128, 1, 32, 8}, Shape{128, 2, 16, 1}, Shape{128, 8, 32, 4},
                      Shape{128, 8, 16, 8}, Shape{256, 2, 16, 4}, Shape{128, 8, 8, 4},
                      Shape{96, 2, 32, 4}, Shape{80, 1, 16, 2}, Shape{20, 2, 16, 2},
                      Shape{64, 3, 8, 3}, Shape{128, 8, 4, 4}, Shape{64, 3, 4, 3}));

// Llama-3.1-8B's shape at a step's scale: 512 blocks summarized, then 8 query rows x 512
// candidates scored in one call against those device summaries, for Quest's box and for the
// default estimator (one center row a block).
TEST_F(CudaBlockSummaryFixture, LlamaShapeSummarizesAndScoresAStep) {
  const Shape shape{128, 8, 32, 4};
  const PagedKvLayout layout = Layout(shape, DType::kBF16);
  const int32_t num_heads = 32;
  constexpr int32_t kBlocks = 520;
  constexpr int32_t kCount = 512;
  constexpr int32_t kRows = 8;
  const std::vector<uint16_t> cache = RandomCache(layout, kBlocks, 8);
  const std::vector<int32_t> block_ids = DistinctIds(kBlocks, kCount, 9);
  const std::vector<int32_t> summary_ids = DistinctIds(kCount, kCount, 10);
  // Every row scores every summary, each row in its own order.
  std::vector<int32_t> candidate_ids;
  std::vector<int32_t> query_rows;
  for (int32_t r = 0; r < kRows; ++r) {
    const std::vector<int32_t> order = DistinctIds(kCount, kCount, 20 + r);
    candidate_ids.insert(candidate_ids.end(), order.begin(), order.end());
    query_rows.insert(query_rows.end(), kCount, r);
  }
  const int64_t q_stride = (num_heads + 2 * shape.num_kv_heads) * shape.head_dim;  // QKV rows
  const std::vector<float> q = RandomValues(static_cast<size_t>(kRows * q_stride), 11);
  DeviceBuffer blocks = Upload(cache);
  DeviceBuffer block_id_buffer = Upload(block_ids);
  DeviceBuffer summary_id_buffer = Upload(summary_ids);
  DeviceBuffer q_buffer = Upload(q);
  DeviceBuffer id_buffer = Upload(candidate_ids);
  DeviceBuffer row_buffer = Upload(query_rows);

  for (const BlockEstimator& estimator : {kQuest, BlockEstimator{}}) {
    SCOPED_TRACE(EstimatorName(estimator, layout.block_tokens));
    const size_t bytes = static_cast<size_t>(kCount * SummaryBytes(layout, estimator));
    DeviceBuffer summaries = Upload(std::vector<std::byte>(bytes, kUntouched));
    cuda_->SummarizeBlocks(blocks.data(), layout, estimator, block_id_buffer.as<int32_t>(),
                           summary_id_buffer.as<int32_t>(), kCount, summaries.data());
    const std::vector<std::byte> expected =
        ReferenceSummaries(layout, cache, block_ids, summary_ids, kCount, estimator);
    ExpectSameSummaries(layout, estimator, Download<std::byte>(summaries, bytes), expected);

    const size_t bound_floats = static_cast<size_t>(num_heads) * candidate_ids.size();
    DeviceBuffer bounds = Upload(Poisoned(bound_floats));
    cuda_->ScoreBlocks(q_buffer.as<float>(), q_stride, num_heads, layout, estimator,
                       summaries.data(), id_buffer.as<int32_t>(), row_buffer.as<int32_t>(),
                       static_cast<int32_t>(candidate_ids.size()), bounds.as<float>());
    ExpectCloseBounds(
        Download(bounds, bound_floats),
        ScoreOnCpu(q, q_stride, num_heads, layout, estimator, expected, candidate_ids, query_rows));
  }
}

// A step of rows of either mode and aggregate, at Llama-3.1-8B's 32 query heads: the device's
// scores are the reference's up to the last bits of the softmax totals' summation order.
TEST_F(CudaBlockSummaryFixture, AggregateScoresMatchesTheReference) {
  constexpr int32_t kHeads = 32;
  const std::vector<int32_t> counts = {507, 1, 0, 300, 1200, 64};
  std::vector<ScoreSegment> segments;
  int32_t first = 0;
  int32_t scores_first = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    const ScoreSegment segment{
        .first = first,
        .count = counts[r],
        .num_sets = r % 2 == 0 ? 1 : 8,
        .aggregate = r % 3 == 2 ? HeadAggregate::kMax : HeadAggregate::kSoftmaxSum,
        .logit_scale = 0.0884f,
        .scores_first = scores_first};
    segments.push_back(segment);
    first += segment.count;
    scores_first += segment.num_sets * segment.count;
  }
  // Bounds spread like q.k upper bounds of real heads: tens, some heads far larger.
  std::vector<float> bounds = RandomValues(static_cast<size_t>(kHeads) * first, 31, -40.0f, 40.0f);
  for (int32_t i = 0; i < first; ++i) bounds[5 * static_cast<size_t>(first) + i] *= 20.0f;
  std::vector<float> expected(static_cast<size_t>(scores_first));
  ASSERT_TRUE(reference::AggregateScores(bounds, kHeads, segments, expected).ok());

  DeviceBuffer bound_buffer = Upload(bounds);
  DeviceBuffer segment_buffer = Upload(segments);
  DeviceBuffer scores = Upload(Poisoned(expected.size()));
  cuda_->AggregateScores(bound_buffer.as<float>(), kHeads, first, segment_buffer.as<ScoreSegment>(),
                         static_cast<int32_t>(segments.size()), 8, scores.as<float>());
  const std::vector<float> actual = Download(scores, expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], 1e-6 * std::abs(expected[i]) + 1e-30) << i;
  }
}

// Synthetic picks: the device draws the reference's bits, at the step it reads from its memory.
TEST_F(CudaBlockSummaryFixture, DrawSyntheticScoresMatchesTheReferenceBitwise) {
  const std::vector<int32_t> counts = {507, 1, 0, 300, 64};
  std::vector<ScoreSegment> segments;
  int32_t first = 0;
  int32_t scores_first = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    segments.push_back({.first = first,
                        .count = counts[r],
                        .num_sets = r % 2 == 0 ? 1 : 8,
                        .scores_first = scores_first});
    first += counts[r];
    scores_first += segments.back().num_sets * counts[r];
  }
  std::vector<int32_t> summary_ids(static_cast<size_t>(first));
  for (int32_t i = 0; i < first; ++i) summary_ids[static_cast<size_t>(i)] = (i * 7919) % 100003;
  const SyntheticPicks picks = SyntheticPicksAt(0.85, 11);
  DeviceBuffer id_buffer = Upload(summary_ids);
  DeviceBuffer segment_buffer = Upload(segments);
  for (const int32_t step : {1, 2, 77, 1 << 30}) {
    std::vector<float> expected(static_cast<size_t>(scores_first));
    ASSERT_TRUE(
        reference::DrawSyntheticScores(summary_ids, segments, step, picks, 5, expected).ok());
    DeviceBuffer step_buffer = Upload(std::vector<int32_t>{step});
    DeviceBuffer scores = Upload(Poisoned(expected.size()));
    cuda_->DrawSyntheticScores(id_buffer.as<int32_t>(), segment_buffer.as<ScoreSegment>(),
                               static_cast<int32_t>(segments.size()), 8, step_buffer.as<int32_t>(),
                               picks, 5, scores.as<float>());
    EXPECT_EQ(Download(scores, expected.size()), expected) << step;
  }
  cuda_->DrawSyntheticScores(id_buffer.as<int32_t>(), segment_buffer.as<ScoreSegment>(), 1, 8,
                             id_buffer.as<int32_t>(), {.period_q = 1000}, 0, id_buffer.as<float>());
  EXPECT_EQ(cuda_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaBlockSummaryFixture, NoBlocksIsNothingToDo) {
  const PagedKvLayout layout = Layout(Shape{64, 2, 16, 2}, DType::kBF16);
  DeviceBuffer summaries = Upload(std::vector<std::byte>(32, kUntouched));
  cuda_->SummarizeBlocks(nullptr, layout, kQuest, nullptr, nullptr, 0, summaries.data());
  cuda_->ScoreBlocks(nullptr, 256, 4, layout, kQuest, summaries.data(), nullptr, nullptr, 0,
                     summaries.as<float>());
  EXPECT_EQ(Download<std::byte>(summaries, 32), std::vector<std::byte>(32, kUntouched));
}

TEST_F(CudaBlockSummaryFixture, RefusesWhatItCannotRun) {
  DeviceBuffer scratch = Upload(std::vector<float>(1024, 0.0f));
  const PagedKvLayout fp32 = Layout(Shape{64, 2, 16, 2}, DType::kF32);
  cuda_->SummarizeBlocks(scratch.data(), fp32, kQuest, nullptr, nullptr, 1, scratch.data());
  EXPECT_EQ(cuda_->Synchronize().code(), absl::StatusCode::kUnimplemented);
  const PagedKvLayout bf16 = Layout(Shape{64, 2, 16, 2}, DType::kBF16);
  cuda_->ScoreBlocks(scratch.as<float>(), 64 * 3, 3, bf16, kQuest, scratch.data(), nullptr, nullptr,
                     1, scratch.as<float>());
  EXPECT_EQ(cuda_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  cuda_->SummarizeBlocks(scratch.data(), bf16, kQuest, nullptr, nullptr, -1, scratch.data());
  EXPECT_EQ(cuda_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  cuda_->SummarizeBlocks(scratch.data(), bf16, {.radius = 1.5f}, nullptr, nullptr, 1,
                         scratch.data());
  EXPECT_EQ(cuda_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  cuda_->SummarizeBlocks(scratch.data(), bf16, {.boxes = 3}, nullptr, nullptr, 1, scratch.data());
  EXPECT_EQ(cuda_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  cuda_->AggregateScores(scratch.as<float>(), 129, 1, nullptr, 1, 1, scratch.as<float>());
  EXPECT_EQ(cuda_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cuda_->Synchronize().ok());
}

}  // namespace
}  // namespace pulse
