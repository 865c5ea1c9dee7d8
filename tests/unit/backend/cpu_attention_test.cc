// AppendKv and paged causal GQA attention of the CPU backend against a dense double reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/cpu_level.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"

namespace pulse {
namespace {

using ::pulse::testing::BitwiseEqual;
using ::pulse::testing::ExpectBitwiseEqual;
using ::pulse::testing::MakeCpuBackend;
using ::pulse::testing::Poisoned;
using ::pulse::testing::RandomValues;
using ::pulse::testing::WithHostCounts;

struct Shape {
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_tokens;
};

// A batch of sequences with dense K/V/Q and a paged cache holding their K/V.
class AttentionProblem {
 public:
  // kv_lens[s] tokens are cached for sequence s, the last q_lens[s] of which are the queries.
  // With `shuffle`, sequences' blocks are scattered over the pool in random order.
  AttentionProblem(const Shape& shape, std::vector<int32_t> kv_lens, std::vector<int32_t> q_lens,
                   bool shuffle, uint32_t seed)
      : shape_(shape), kv_lens_(std::move(kv_lens)), q_lens_(std::move(q_lens)) {
    layout_ = {shape.block_tokens, shape.num_kv_heads, shape.head_dim};
    const int32_t num_seqs = static_cast<int32_t>(kv_lens_.size());
    for (int32_t len : kv_lens_) {
      max_blocks_ = std::max(max_blocks_, (len + shape.block_tokens - 1) / shape.block_tokens);
    }
    const int32_t num_blocks = num_seqs * max_blocks_ + 3;  // a few blocks nobody uses
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::mt19937 rng(seed);
    if (shuffle) std::shuffle(pool.begin(), pool.end(), rng);
    block_tables_.assign(pool.begin(), pool.begin() + num_seqs * max_blocks_);
    blocks_ = Poisoned(num_blocks * layout_.block_elems());

    q_offsets_.push_back(0);
    for (int32_t s = 0; s < num_seqs; ++s) q_offsets_.push_back(q_offsets_.back() + q_lens_[s]);
    kv_width_ = shape.num_kv_heads * shape.head_dim;
    for (int32_t s = 0; s < num_seqs; ++s) {
      keys_.push_back(RandomValues(kv_lens_[s] * kv_width_, seed + 10 + s));
      values_.push_back(RandomValues(kv_lens_[s] * kv_width_, seed + 100 + s));
    }
    q_stride_ = shape.num_heads * shape.head_dim + 3;  // padded rows, as in a fused qkv row
    q_ = RandomValues(q_offsets_.back() * q_stride_, seed + 1000);
  }

  // Appends every sequence's whole K/V in one AppendKv call (all tokens as new rows).
  void FillCache(Backend& backend) {
    std::vector<int32_t> offsets = {0};
    std::vector<float> k_rows;
    std::vector<float> v_rows;
    for (size_t s = 0; s < kv_lens_.size(); ++s) {
      offsets.push_back(offsets.back() + kv_lens_[s]);
      k_rows.insert(k_rows.end(), keys_[s].begin(), keys_[s].end());
      v_rows.insert(v_rows.end(), values_[s].begin(), values_[s].end());
    }
    PagedKvBatch kv = Batch();
    kv.q_offsets = offsets.data();
    backend.AppendKv(k_rows.data(), v_rows.data(), kv_width_, WithHostCounts(kv));
  }

  PagedKvBatch Batch() {
    PagedKvBatch kv;
    kv.blocks = blocks_.data();
    kv.layout = layout_;
    kv.num_seqs = static_cast<int32_t>(kv_lens_.size());
    kv.max_blocks_per_seq = max_blocks_;
    kv.block_tables = block_tables_.data();
    kv.kv_lens = kv_lens_.data();
    kv.q_offsets = q_offsets_.data();
    return kv;
  }

  std::vector<float> Run(Backend& backend) {
    std::vector<float> out = Poisoned(num_rows() * out_width());
    backend.Attention(q_.data(), q_stride_, shape_.num_heads, WithHostCounts(Batch()), scale(),
                      out.data());
    return out;
  }

  // Tokens [begin, end) of sequence `seq` appended as the new rows of a one-sequence batch.
  void AppendTokens(Backend& backend, int32_t seq, int32_t begin, int32_t end) {
    const int32_t offsets[2] = {0, end - begin};
    PagedKvBatch kv = Batch();
    kv.num_seqs = 1;
    kv.block_tables = block_tables_.data() + seq * max_blocks_;
    kv.kv_lens = &end;
    kv.q_offsets = offsets;
    backend.AppendKv(keys_[seq].data() + begin * kv_width_, values_[seq].data() + begin * kv_width_,
                     kv_width_, WithHostCounts(kv));
  }

  // Query rows [row, row + count) of sequence `seq` alone: a batch of one sequence cut at the
  // last row's position.
  std::vector<float> RunRows(Backend& backend, int32_t seq, int32_t row, int32_t count) {
    const int32_t kv_len = kv_lens_[seq] - q_lens_[seq] + (row - q_offsets_[seq]) + count;
    const int32_t offsets[2] = {0, count};
    PagedKvBatch kv = Batch();
    kv.num_seqs = 1;
    kv.block_tables = block_tables_.data() + seq * max_blocks_;
    kv.kv_lens = &kv_len;
    kv.q_offsets = offsets;
    std::vector<float> out = Poisoned(count * out_width());
    backend.Attention(q_.data() + row * q_stride_, q_stride_, shape_.num_heads, WithHostCounts(kv),
                      scale(), out.data());
    return out;
  }

  std::vector<double> Reference() const {
    const int32_t hd = shape_.head_dim;
    const int32_t group = shape_.num_heads / shape_.num_kv_heads;
    std::vector<double> out(num_rows() * out_width());
    for (size_t s = 0; s < kv_lens_.size(); ++s) {
      for (int32_t row = q_offsets_[s]; row < q_offsets_[s + 1]; ++row) {
        const int32_t position = kv_lens_[s] - q_lens_[s] + (row - q_offsets_[s]);
        for (int32_t h = 0; h < shape_.num_heads; ++h) {
          const int32_t kvh = h / group;
          std::vector<double> scores(position + 1);
          for (int32_t t = 0; t <= position; ++t) {
            double dot = 0;
            for (int32_t d = 0; d < hd; ++d) {
              dot +=
                  double{q_[row * q_stride_ + h * hd + d]} * keys_[s][t * kv_width_ + kvh * hd + d];
            }
            scores[t] = dot * scale();
          }
          const double max_score = *std::max_element(scores.begin(), scores.end());
          double sum = 0;
          for (double& score : scores) sum += (score = std::exp(score - max_score));
          for (int32_t d = 0; d < hd; ++d) {
            double acc = 0;
            for (int32_t t = 0; t <= position; ++t) {
              acc += scores[t] * values_[s][t * kv_width_ + kvh * hd + d];
            }
            out[(row * shape_.num_heads + h) * hd + d] = acc / sum;
          }
        }
      }
    }
    return out;
  }

  int32_t num_rows() const { return q_offsets_.back(); }
  int32_t out_width() const { return shape_.num_heads * shape_.head_dim; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(shape_.head_dim)); }
  const std::vector<int32_t>& q_offsets() const { return q_offsets_; }

 private:
  Shape shape_;
  PagedKvLayout layout_;
  std::vector<int32_t> kv_lens_;
  std::vector<int32_t> q_lens_;
  std::vector<int32_t> q_offsets_;
  int32_t max_blocks_ = 0;
  std::vector<int32_t> block_tables_;
  std::vector<float> blocks_;
  int32_t kv_width_ = 0;
  std::vector<std::vector<float>> keys_;
  std::vector<std::vector<float>> values_;
  int64_t q_stride_ = 0;
  std::vector<float> q_;
};

// Outputs are convex combinations of values in [-1, 1]: an absolute bound is the right one.
void ExpectNearReference(const std::vector<float>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  int failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!(std::abs(actual[i] - expected[i]) <= 1e-5) && failures++ < 5) {
      ADD_FAILURE() << "element " << i << ": " << actual[i] << " vs " << expected[i];
    }
  }
  EXPECT_EQ(failures, 0);
}

const Shape kShapes[] = {
    {6, 2, 64, 16},  // GQA, group 3
    {4, 4, 20, 4},   // MHA, head_dim not a multiple of the lane width
    {4, 1, 33, 5},   // MQA
    {2, 1, 80, 8},   // one full register chunk of the value sum plus a partial one
};

// Decode rows, prefill chunks, and a whole prompt, in one batch; the last two sequences are
// longer than a work item's 512 keys: a decode row of three ranges, and a chunk whose rows end
// on both sides of key 1024.
const std::vector<int32_t> kKvLens = {1, 37, 70, 16, 9, 1100, 1030};
const std::vector<int32_t> kQLens = {1, 1, 12, 16, 3, 1, 12};

TEST(AttentionTest, MatchesDenseReference) {
  auto backend = MakeCpuBackend(2);
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(::testing::Message() << "heads " << shape.num_heads << "/" << shape.num_kv_heads
                                      << " head_dim " << shape.head_dim);
    AttentionProblem problem(shape, kKvLens, kQLens, /*shuffle=*/true, 7);
    problem.FillCache(*backend);
    ExpectNearReference(problem.Run(*backend), problem.Reference());
  }
}

TEST(AttentionTest, ShuffledBlockTableEqualsContiguousBitwise) {
  auto backend = MakeCpuBackend(2);
  for (const Shape& shape : kShapes) {
    AttentionProblem contiguous(shape, kKvLens, kQLens, /*shuffle=*/false, 9);
    AttentionProblem shuffled(shape, kKvLens, kQLens, /*shuffle=*/true, 9);
    contiguous.FillCache(*backend);
    shuffled.FillCache(*backend);
    const std::vector<float> a = contiguous.Run(*backend);
    const std::vector<float> b = shuffled.Run(*backend);
    ExpectBitwiseEqual(b.data(), a.data(), a.size());
  }
}

TEST(AttentionTest, RowsDoNotDependOnTheBatchOrThreads) {
  auto one_thread = MakeCpuBackend(1);
  auto two_threads = MakeCpuBackend(2);
  for (const Shape& shape : kShapes) {
    AttentionProblem problem(shape, kKvLens, kQLens, /*shuffle=*/true, 11);
    problem.FillCache(*two_threads);
    const std::vector<float> batched = problem.Run(*two_threads);
    const std::vector<float> single_threaded = problem.Run(*one_thread);
    ExpectBitwiseEqual(single_threaded.data(), batched.data(), batched.size());
    const std::vector<int32_t>& offsets = problem.q_offsets();
    for (int32_t s = 0; s + 1 < static_cast<int32_t>(offsets.size()); ++s) {
      for (int32_t row = offsets[s]; row < offsets[s + 1]; ++row) {
        // Alone on two threads a row of one KV head's few keys is split by query head.
        for (Backend* backend : {one_thread.get(), two_threads.get()}) {
          const std::vector<float> alone = problem.RunRows(*backend, s, row, 1);
          ExpectBitwiseEqual(alone.data(), batched.data() + row * problem.out_width(),
                             problem.out_width());
        }
      }
    }
  }
}

TEST(AppendKvTest, WritesEachRowToItsSlotOnly) {
  auto backend = MakeCpuBackend(1);
  const PagedKvLayout layout = {/*block_tokens=*/4, /*num_kv_heads=*/2, /*head_dim=*/3};
  // Two sequences: 3 new tokens at positions 5..7 of seq 0, 2 new at positions 0..1 of seq 1.
  const std::vector<int32_t> kv_lens = {8, 2};
  const std::vector<int32_t> q_offsets = {0, 3, 5};
  const std::vector<int32_t> block_tables = {4, 1, 0, 3};  // 2 blocks per sequence
  std::vector<float> blocks = Poisoned(5 * layout.block_elems());
  const int64_t row_stride = 14;  // k (6 values), v (6) and padding (2) in one row
  std::vector<float> rows(5 * row_stride);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  PagedKvBatch kv;
  kv.blocks = blocks.data();
  kv.layout = layout;
  kv.num_seqs = 2;
  kv.max_blocks_per_seq = 2;
  kv.block_tables = block_tables.data();
  kv.kv_lens = kv_lens.data();
  kv.q_offsets = q_offsets.data();
  backend->AppendKv(rows.data(), rows.data() + 6, row_stride, WithHostCounts(kv));

  std::vector<bool> written(blocks.size(), false);
  auto expect_slot = [&](int32_t row, int32_t block, int32_t slot) {
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      for (int32_t d = 0; d < layout.head_dim; ++d) {
        const int64_t key =
            block * layout.block_elems() + h * layout.head_elems() + slot * layout.head_dim + d;
        const int64_t value = key + layout.num_kv_heads * layout.head_elems();
        EXPECT_EQ(blocks[key], rows[row * row_stride + h * 3 + d]) << "row " << row;
        EXPECT_EQ(blocks[value], rows[row * row_stride + 6 + h * 3 + d]) << "row " << row;
        written[key] = written[value] = true;
      }
    }
  };
  expect_slot(0, /*block=*/block_tables[1], /*slot=*/1);  // position 5
  expect_slot(1, block_tables[1], 2);                     // position 6
  expect_slot(2, block_tables[1], 3);                     // position 7
  expect_slot(3, block_tables[2], 0);                     // seq 1, position 0
  expect_slot(4, block_tables[2], 1);                     // seq 1, position 1
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!written[i]) {
      EXPECT_TRUE(std::isnan(blocks[i])) << "element " << i << " was written";
    }
  }
}

// The levels with FMA attend bit for bit alike: AVX-512 reduces a tile's sixteen dot products as
// one tree (ReduceLanes16), AVX2 one ReduceLanes each.
TEST(AttentionTest, TheLevelsWithFmaGiveTheSameBits) {
  using cpu::CpuLevel;
  if (!cpu::CpuLevelSupported(CpuLevel::kAvx512)) GTEST_SKIP() << "no AVX-512 here";
  std::vector<std::shared_ptr<Backend>> backends;
  for (const CpuLevel level : {CpuLevel::kAvx512, CpuLevel::kAvx2}) {
    absl::StatusOr<std::shared_ptr<Backend>> backend =
        CreateCpuBackend({.threads = 2, .kernel_level = level});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backends.push_back(*std::move(backend));
  }
  for (const Shape& shape : kShapes) {
    AttentionProblem problem(shape, kKvLens, kQLens, /*shuffle=*/true, 17);
    problem.FillCache(*backends[0]);
    const std::vector<float> avx512 = problem.Run(*backends[0]);
    const std::vector<float> avx2 = problem.Run(*backends[1]);
    ExpectBitwiseEqual(avx2.data(), avx512.data(), avx512.size());
  }
}

TEST(AttentionTest, ChunkedPrefillEqualsWholePrefill) {
  auto backend = MakeCpuBackend(2);
  constexpr int32_t kLen = 1100;  // rows of one, two and three ranges of keys
  constexpr int32_t kChunk = 250;
  AttentionProblem whole(kShapes[0], {kLen}, {kLen}, /*shuffle=*/true, 13);
  whole.FillCache(*backend);
  const std::vector<float> expected = whole.Run(*backend);

  // The same prompt again, appended and attended chunk by chunk.
  AttentionProblem chunked(kShapes[0], {kLen}, {kLen}, /*shuffle=*/true, 13);
  for (int32_t begin = 0; begin < kLen; begin += kChunk) {
    const int32_t count = std::min(kChunk, kLen - begin);
    chunked.AppendTokens(*backend, 0, begin, begin + count);
    const std::vector<float> out = chunked.RunRows(*backend, 0, begin, count);
    ExpectBitwiseEqual(out.data(), expected.data() + begin * chunked.out_width(), out.size());
  }
}

}  // namespace
}  // namespace pulse

namespace pulse {
namespace {

// Head-wise tables: each KV head of a sequence reads its own list of blocks (what head-wise
// sparse selection hands attention). Each query head's output must be bitwise what a shared-table
// batch over its KV head's list gives.
TEST(AttentionTest, PerHeadTablesEqualOneSharedTableAHead) {
  const PagedKvLayout layout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 16};
  constexpr int32_t kHeads = 6;  // groups of 3
  constexpr int32_t kBlocks = 9;
  std::shared_ptr<Backend> backend = MakeCpuBackend(2);
  const std::vector<float> blocks = RandomValues(kBlocks * layout.block_elems(), 71);
  // Two sequences; per KV head a selection of blocks in logical order, the last one partial.
  const std::vector<std::vector<int32_t>> tables = {{0, 3, 5}, {1, 3, 5}, {7, 2, 8}, {6, 2, 8}};
  const std::vector<int32_t> kv_lens = {10, 9, 11, 11};  // per (sequence, KV head)
  const int32_t max_blocks = 3;
  std::vector<int32_t> flat;
  for (const std::vector<int32_t>& table : tables)
    flat.insert(flat.end(), table.begin(), table.end());
  const std::vector<int32_t> q_offsets = {0, 1, 2};
  const int64_t q_stride = kHeads * layout.head_dim;
  const std::vector<float> q = RandomValues(2 * q_stride, 72);
  PagedKvBatch kv{.blocks = const_cast<float*>(blocks.data()),
                  .layout = layout,
                  .num_seqs = 2,
                  .max_blocks_per_seq = max_blocks,
                  .block_tables = flat.data(),
                  .kv_lens = kv_lens.data(),
                  .q_offsets = q_offsets.data(),
                  .num_rows = 2,
                  .max_q_len = 1,
                  .max_kv_len = 11,
                  .table_heads = 2};
  std::vector<float> per_head = Poisoned(2 * q_stride);
  backend->Attention(q.data(), q_stride, kHeads, kv, 0.25f, per_head.data());

  for (int32_t seq = 0; seq < 2; ++seq) {
    for (int32_t kv_head = 0; kv_head < 2; ++kv_head) {
      const int32_t row = seq * 2 + kv_head;
      const int32_t one_offset[2] = {0, 1};
      PagedKvBatch shared{.blocks = const_cast<float*>(blocks.data()),
                          .layout = layout,
                          .num_seqs = 1,
                          .max_blocks_per_seq = max_blocks,
                          .block_tables = tables[row].data(),
                          .kv_lens = &kv_lens[row],
                          .q_offsets = one_offset,
                          .num_rows = 1,
                          .max_q_len = 1,
                          .max_kv_len = kv_lens[row]};
      std::vector<float> expected = Poisoned(q_stride);
      backend->Attention(q.data() + seq * q_stride, q_stride, kHeads, shared, 0.25f,
                         expected.data());
      for (int32_t head = kv_head * 3; head < kv_head * 3 + 3; ++head) {
        const int64_t at = int64_t{head} * layout.head_dim;
        ExpectBitwiseEqual(per_head.data() + seq * q_stride + at, expected.data() + at,
                           layout.head_dim);
      }
    }
  }
}

}  // namespace
}  // namespace pulse
