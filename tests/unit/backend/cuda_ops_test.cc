// The CUDA backend op by op against the CPU backend, on fresh random inputs with odd sizes and
// outputs poisoned with NaN before each run. Inputs that the CUDA backend keeps as bf16 (GEMM
// operands, the KV cache) are rounded to bf16 for the CPU too, so the comparison measures the
// kernels, not the storage type. Skipped without a CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/backend/bf16.h"
#include "core/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"

namespace pulse {
namespace {

using ::pulse::testing::MakeCpuBackend;
using ::pulse::testing::Poisoned;
using ::pulse::testing::RandomValues;
using ::pulse::testing::RoundToBf16;
using ::pulse::testing::WithHostCounts;

constexpr double kFp32Tolerance = 1e-5;
constexpr double kBf16Tolerance = 1e-2;
constexpr uint16_t kBf16NaN = 0x7FC0;

// ||actual - expected|| / ||expected||, or infinity when an element of actual is not finite.
double RelativeError(const std::vector<float>& actual, const std::vector<float>& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double diff = 0;
  double norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i])) return INFINITY;
    diff += (double{actual[i]} - expected[i]) * (double{actual[i]} - expected[i]);
    norm += double{expected[i]} * expected[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::shared_ptr<Backend>> cuda = CreateCudaBackend({});
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    cuda_ = *cuda;
    cpu_ = MakeCpuBackend(2);
  }

  DeviceBuffer Upload(const void* data, size_t bytes) {
    absl::StatusOr<DeviceBuffer> buffer = cuda_->Allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    cuda_->CopyToDevice(buffer->data(), data, bytes);
    return *std::move(buffer);
  }
  DeviceBuffer UploadF32(const std::vector<float>& values) {
    return Upload(values.data(), values.size() * sizeof(float));
  }
  DeviceBuffer UploadInts(const std::vector<int32_t>& values) {
    return Upload(values.data(), values.size() * sizeof(int32_t));
  }
  DeviceBuffer UploadBf16(const std::vector<float>& values) {
    std::vector<uint16_t> bits(values.size());
    std::transform(values.begin(), values.end(), bits.begin(), F32ToBf16);
    return Upload(bits.data(), bits.size() * sizeof(uint16_t));
  }
  DeviceBuffer PoisonedF32(size_t count) { return UploadF32(Poisoned(count)); }
  DeviceBuffer PoisonedBf16(size_t count) {
    const std::vector<uint16_t> bits(count, kBf16NaN);
    return Upload(bits.data(), bits.size() * sizeof(uint16_t));
  }

  std::vector<float> DownloadF32(const DeviceBuffer& buffer, size_t count) {
    std::vector<float> values(count);
    const absl::Status status =
        cuda_->CopyToHost(values.data(), buffer.data(), count * sizeof(float));
    EXPECT_TRUE(status.ok()) << status;
    return values;
  }
  std::vector<float> DownloadBf16(const DeviceBuffer& buffer, size_t count) {
    std::vector<uint16_t> bits(count);
    const absl::Status status =
        cuda_->CopyToHost(bits.data(), buffer.data(), count * sizeof(uint16_t));
    EXPECT_TRUE(status.ok()) << status;
    std::vector<float> values(count);
    std::transform(bits.begin(), bits.end(), values.begin(), Bf16ToF32);
    return values;
  }

  std::shared_ptr<Backend> cuda_;
  std::shared_ptr<Backend> cpu_;
};

TEST_F(CudaOpsTest, BackendDescribesItself) {
  EXPECT_EQ(cuda_->name(), "cuda");
  EXPECT_EQ(cuda_->activation_type(), DType::kBF16);
  EXPECT_EQ(cuda_->kv_type(), DType::kBF16);
  EXPECT_GT(cuda_->AvailableBytes(), size_t{1} << 30);
  const PagedKvLayout odd{
      .block_tokens = 16, .num_kv_heads = 2, .head_dim = 80, .type = DType::kBF16};
  EXPECT_EQ(cuda_->CheckAttention(4, odd).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(cuda_->UploadWeight(RandomValues(6, 1), 2, 3, DType::kF32).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(CudaOpsTest, EmbedIsExact) {
  const int64_t vocab = 1003;
  const int64_t hidden = 200;
  const std::vector<float> table = RandomValues(vocab * hidden, 1);
  const std::vector<int32_t> tokens = {5, 1002, 0, 77, 5, 999, 12};
  Weight cuda_table = *cuda_->UploadWeight(table, vocab, hidden, DType::kBF16);
  Weight cpu_table = *cpu_->UploadWeight(table, vocab, hidden, DType::kBF16);
  DeviceBuffer ids = UploadInts(tokens);
  DeviceBuffer out = PoisonedF32(tokens.size() * hidden);
  cuda_->Embed(cuda_table.view(), 0, ids.as<int32_t>(), tokens.size(), out.as<float>());
  std::vector<float> expected(tokens.size() * hidden);
  cpu_->Embed(cpu_table.view(), 0, tokens.data(), tokens.size(), expected.data());
  EXPECT_EQ(DownloadF32(out, expected.size()), expected);
  // As a shard of a vocabulary that starts at row 500: -0.0 for rows it lacks, bit for bit.
  cuda_->Embed(cuda_table.view(), 500, ids.as<int32_t>(), tokens.size(), out.as<float>());
  cpu_->Embed(cpu_table.view(), 500, tokens.data(), tokens.size(), expected.data());
  const std::vector<float> shard = DownloadF32(out, expected.size());
  EXPECT_EQ(std::memcmp(shard.data(), expected.data(), expected.size() * sizeof(float)), 0);
}

struct GemmShape {
  int64_t m, n, k;
  bool bias;
};

void PrintTo(const GemmShape& s, std::ostream* os) {
  *os << s.m << "x" << s.n << "x" << s.k << (s.bias ? "_bias" : "");
}

class CudaGemmTest : public CudaOpsTest, public ::testing::WithParamInterface<GemmShape> {};

TEST_P(CudaGemmTest, MatchesCpu) {
  const auto [m, n, k, with_bias] = GetParam();
  const std::vector<float> w = RandomValues(n * k, 11);
  const std::vector<float> x = RoundToBf16(RandomValues(m * k, 12));
  const std::vector<float> bias = RandomValues(n, 13);
  Weight cuda_w = *cuda_->UploadWeight(w, n, k, DType::kBF16);
  Weight cpu_w = *cpu_->UploadWeight(w, n, k, DType::kBF16);
  DeviceBuffer cuda_x = UploadBf16(x);
  DeviceBuffer cuda_bias = UploadF32(bias);
  DeviceBuffer y = PoisonedF32(m * n);
  cuda_->Gemm(cuda_x.data(), m, cuda_w.view(), with_bias ? cuda_bias.as<float>() : nullptr,
              y.as<float>());
  std::vector<float> expected(m * n);
  cpu_->Gemm(x.data(), m, cpu_w.view(), with_bias ? bias.data() : nullptr, expected.data());
  EXPECT_LT(RelativeError(DownloadF32(y, expected.size()), expected), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGemmTest,
    ::testing::Values(GemmShape{1, 96, 64, false}, GemmShape{3, 1000, 200, true},
                      GemmShape{5, 48, 96, true}, GemmShape{2, 160, 1024, true},
                      GemmShape{8, 4096, 4096, false}, GemmShape{7, 64, 14336, true},
                      GemmShape{9, 160, 1024, false}, GemmShape{17, 576, 576, false},
                      GemmShape{64, 1536, 576, true}, GemmShape{300, 264, 1536, false}));

TEST_F(CudaOpsTest, RmsNormAndAddRmsNormMatchCpu) {
  // Rows in registers at 1, 2, 4 and 8 float4s a thread, and the loop kernel (6, 10000).
  for (const int64_t cols : {64, 576, 4096, 100, 6, 1500, 8192, 10000}) {
    const int64_t rows = 7;
    const std::vector<float> x = RandomValues(rows * cols, 21, -3.0f, 3.0f);
    const std::vector<float> residual = RandomValues(rows * cols, 22);
    const std::vector<float> weight = RandomValues(cols, 23, 0.5f, 1.5f);
    DeviceBuffer cuda_x = UploadF32(x);
    DeviceBuffer cuda_residual = UploadF32(residual);
    DeviceBuffer cuda_weight = UploadF32(weight);
    DeviceBuffer y = PoisonedBf16(rows * cols);
    cuda_->RmsNorm(cuda_x.as<float>(), cuda_weight.as<float>(), rows, cols, 1e-5f, y.data());
    std::vector<float> expected(rows * cols);
    cpu_->RmsNorm(x.data(), weight.data(), rows, cols, 1e-5f, expected.data());
    EXPECT_LT(RelativeError(DownloadBf16(y, expected.size()), expected), kBf16Tolerance) << cols;

    DeviceBuffer y2 = PoisonedBf16(rows * cols);
    cuda_->AddRmsNorm(cuda_residual.as<float>(), cuda_x.as<float>(), cuda_weight.as<float>(), rows,
                      cols, 1e-5f, y2.data());
    std::vector<float> cpu_residual = residual;
    cpu_->AddRmsNorm(cpu_residual.data(), x.data(), weight.data(), rows, cols, 1e-5f,
                     expected.data());
    EXPECT_LT(RelativeError(DownloadBf16(y2, expected.size()), expected), kBf16Tolerance) << cols;
    EXPECT_LT(RelativeError(DownloadF32(cuda_residual, residual.size()), cpu_residual),
              kFp32Tolerance)
        << cols;
  }
}

// Llama 3's rotary frequencies (theta 500000) for `head_dim`.
std::vector<float> RopeInvFreq(int32_t head_dim) {
  std::vector<float> inv_freq(head_dim / 2);
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / head_dim));
  }
  return inv_freq;
}

// 5 rows (a row over several blocks) and 600 (a block a row, looping over it).
TEST_F(CudaOpsTest, RopeMatchesCpu) {
  for (const auto& [head_dim, rows] : {std::pair<int32_t, int64_t>{64, 5}, {128, 5}, {128, 600}}) {
    const int32_t heads = 3;
    const int64_t stride = heads * head_dim + 8;
    std::vector<float> x = RandomValues(rows * stride, 31);
    std::vector<int32_t> positions = {0, 1, 77, 4095, 131071};
    for (int64_t r = 5; r < rows; ++r) positions.push_back(static_cast<int32_t>(r * 211 % 131072));
    const std::vector<float> inv_freq = RopeInvFreq(head_dim);
    DeviceBuffer cuda_x = UploadF32(x);
    DeviceBuffer cuda_positions = UploadInts(positions);
    DeviceBuffer cuda_inv_freq = UploadF32(inv_freq);
    cuda_->Rope(cuda_x.as<float>(), rows, stride, heads, head_dim, cuda_positions.as<int32_t>(),
                cuda_inv_freq.as<float>());
    cpu_->Rope(x.data(), rows, stride, heads, head_dim, positions.data(), inv_freq.data());
    EXPECT_LT(RelativeError(DownloadF32(cuda_x, x.size()), x), kFp32Tolerance) << head_dim;
  }
}

// A batch of sequences appending rows to the paged cache: its host-side descriptor arrays.
struct AppendBatch {
  std::vector<int32_t> kv_lens;
  std::vector<int32_t> q_offsets;
  std::vector<int32_t> positions;
  int32_t max_blocks = 0;
  std::vector<int32_t> tables;  // num_seqs x max_blocks, -1 unused
  int32_t cache_blocks = 0;
};

// Three sequences of 5, 33 and 17 tokens: the first two append their last 5 and 3 tokens, the
// third one (a decode step). Few rows: each row spreads over several blocks.
AppendBatch MixedAppendBatch() {
  return {.kv_lens = {5, 33, 17},
          .q_offsets = {0, 5, 8, 9},
          .positions = {0, 1, 2, 3, 4, 30, 31, 32, 16},
          .max_blocks = 3,
          .tables = {4, -1, -1, 0, 5, 2, 1, 3, -1},
          .cache_blocks = 6};
}

// One prompt chunk of 300 tokens after 20 cached ones: enough rows that a block loops over a row.
AppendBatch ChunkAppendBatch(int32_t block_tokens) {
  AppendBatch batch;
  batch.kv_lens = {320};
  batch.q_offsets = {0, 300};
  for (int32_t p = 20; p < 320; ++p) batch.positions.push_back(p);
  batch.max_blocks = (320 + block_tokens - 1) / block_tokens;
  batch.cache_blocks = batch.max_blocks;
  for (int32_t b = 0; b < batch.max_blocks; ++b) {
    batch.tables.push_back(batch.max_blocks - 1 - b);  // reversed
  }
  return batch;
}

// The fused op against its definition on the same backend: Rope of the queries and keys, then
// AppendKv, bit for bit (rows of prompt chunks and of decode steps, two head sizes).
TEST_F(CudaOpsTest, RopeAppendKvIsRopeThenAppendKv) {
  for (const int32_t head_dim : {64, 128}) {
    const int32_t heads = 4;
    const PagedKvLayout layout{
        .block_tokens = 16, .num_kv_heads = 2, .head_dim = head_dim, .type = DType::kBF16};
    const std::vector<float> inv_freq = RopeInvFreq(head_dim);
    for (const AppendBatch& batch : {MixedAppendBatch(), ChunkAppendBatch(16)}) {
      const int32_t num_seqs = static_cast<int32_t>(batch.kv_lens.size());
      const int64_t rows = batch.q_offsets.back();
      int32_t max_q_len = 0;
      for (int32_t s = 0; s < num_seqs; ++s) {
        max_q_len = std::max(max_q_len, batch.q_offsets[s + 1] - batch.q_offsets[s]);
      }
      const int64_t stride = int64_t{heads + 2 * layout.num_kv_heads} * head_dim + 4;
      const std::vector<float> qkv = RandomValues(rows * stride, 61, -3.0f, 3.0f);
      const int64_t cache_elems = batch.cache_blocks * layout.block_elems();
      DeviceBuffer cuda_positions = UploadInts(batch.positions);
      DeviceBuffer cuda_inv_freq = UploadF32(inv_freq);
      DeviceBuffer cuda_tables = UploadInts(batch.tables);
      DeviceBuffer cuda_lens = UploadInts(batch.kv_lens);
      DeviceBuffer cuda_offsets = UploadInts(batch.q_offsets);
      PagedKvBatch kv{.layout = layout,
                      .num_seqs = num_seqs,
                      .max_blocks_per_seq = batch.max_blocks,
                      .block_tables = cuda_tables.as<int32_t>(),
                      .kv_lens = cuda_lens.as<int32_t>(),
                      .q_offsets = cuda_offsets.as<int32_t>(),
                      .num_rows = static_cast<int32_t>(rows),
                      .max_q_len = max_q_len,
                      .max_kv_len = *std::max_element(batch.kv_lens.begin(), batch.kv_lens.end())};

      DeviceBuffer fused_qkv = UploadF32(qkv);
      DeviceBuffer fused_cache = PoisonedBf16(cache_elems);
      kv.blocks = fused_cache.data();
      cuda_->RopeAppendKv(fused_qkv.as<float>(), rows, stride, heads, cuda_positions.as<int32_t>(),
                          cuda_inv_freq.as<float>(), kv);

      DeviceBuffer qkv_buffer = UploadF32(qkv);
      DeviceBuffer cache = PoisonedBf16(cache_elems);
      kv.blocks = cache.data();
      float* keys = qkv_buffer.as<float>() + int64_t{heads} * head_dim;
      cuda_->Rope(qkv_buffer.as<float>(), rows, stride, heads + layout.num_kv_heads, head_dim,
                  cuda_positions.as<int32_t>(), cuda_inv_freq.as<float>());
      cuda_->AppendKv(keys, keys + int64_t{layout.num_kv_heads} * head_dim, stride, kv);
      ASSERT_TRUE(cuda_->Synchronize().ok()) << head_dim << " " << rows;

      const std::vector<float> rotated = DownloadF32(qkv_buffer, qkv.size());
      EXPECT_EQ(DownloadF32(fused_qkv, qkv.size()), rotated) << head_dim << " " << rows;
      EXPECT_NE(rotated, qkv);
      // Poisoned (NaN) slots that no row writes stay NaN in both: compare the bits.
      const std::vector<float> expected_cache = DownloadBf16(cache, cache_elems);
      const std::vector<float> fused = DownloadBf16(fused_cache, cache_elems);
      ASSERT_EQ(fused.size(), expected_cache.size());
      EXPECT_EQ(std::memcmp(fused.data(), expected_cache.data(), fused.size() * sizeof(float)), 0)
          << head_dim << " " << rows;
    }
  }
}

TEST_F(CudaOpsTest, SwiGluAndGatherRowsMatchCpu) {
  const int64_t m = 3;
  for (const int64_t inter : {1000, 998}) {  // four columns a thread, and one
    const std::vector<float> gate_up = RandomValues(m * 2 * inter, 41, -6.0f, 6.0f);
    DeviceBuffer cuda_gate_up = UploadF32(gate_up);
    DeviceBuffer out = PoisonedBf16(m * inter);
    cuda_->SwiGlu(cuda_gate_up.as<float>(), m, inter, out.data());
    std::vector<float> expected(m * inter);
    cpu_->SwiGlu(gate_up.data(), m, inter, expected.data());
    EXPECT_LT(RelativeError(DownloadBf16(out, expected.size()), expected), kBf16Tolerance) << inter;
  }

  const int64_t cols = 72;
  const std::vector<float> x = RoundToBf16(RandomValues(6 * cols, 42));
  const std::vector<int32_t> rows = {5, 0, 3};
  DeviceBuffer cuda_x = UploadBf16(x);
  DeviceBuffer cuda_rows = UploadInts(rows);
  DeviceBuffer gathered = PoisonedBf16(rows.size() * cols);
  cuda_->GatherRows(cuda_x.data(), cols, cuda_rows.as<int32_t>(), rows.size(), gathered.data());
  std::vector<float> expected_rows(rows.size() * cols);
  cpu_->GatherRows(x.data(), cols, rows.data(), rows.size(), expected_rows.data());
  EXPECT_EQ(DownloadBf16(gathered, expected_rows.size()), expected_rows);
}

TEST_F(CudaOpsTest, SampleTokensDrawsTheCpuTokens) {
  for (const int64_t vocab : {1000, 49152, 128256}) {
    // Rows that cover every filter alone and together, plus rows that cannot be sampled.
    std::vector<TokenSampling> params = {
        {.temperature = 0.0f},
        {.temperature = 1.0f},
        {.temperature = 0.7f, .top_p = 0.9f},
        {.temperature = 1.3f, .top_k = 50},
        {.temperature = 0.8f, .top_p = 0.5f, .min_p = 0.05f, .top_k = 400},
        {.temperature = 1.0f, .min_p = 0.2f},
        {.temperature = 1e-20f},
        {.temperature = 0.0f, .repetition_penalty = 1.3f},
        {.temperature = 0.9f, .top_p = 0.95f, .repetition_penalty = 1.2f},
        {.temperature = 1.0f},  // a NaN logit
        {.temperature = 0.0f},  // every logit -inf
    };
    const int64_t rows = static_cast<int64_t>(params.size());
    std::vector<float> logits = RandomValues(rows * vocab, 61 + vocab, -8.0f, 8.0f);
    logits[0 * vocab + 7] = logits[0 * vocab + 3] = 100.0f;  // a tie: the lower id wins
    logits[9 * vocab + vocab / 2] = NAN;
    std::fill(logits.begin() + 10 * vocab, logits.begin() + 11 * vocab, -INFINITY);
    // A few masked tokens everywhere.
    for (int64_t r = 0; r < rows - 1; ++r) logits[r * vocab + 11] = -INFINITY;
    std::vector<int32_t> history;
    for (size_t r = 0; r < params.size(); ++r) {
      params[r].history_offset = static_cast<int32_t>(history.size());
      if (params[r].repetition_penalty != 1.0f) {
        for (int32_t id = 0; id < 300; id += 3) history.push_back(id);
        history.push_back(static_cast<int32_t>(vocab) + 5);  // outside: ignored
      }
      params[r].history_count = static_cast<int32_t>(history.size()) - params[r].history_offset;
    }
    history.push_back(0);  // never empty
    std::vector<int32_t> expected(rows);
    std::mt19937_64 draws(vocab);
    for (int trial = 0; trial < 20; ++trial) {
      for (TokenSampling& p : params) p.uniform = static_cast<double>(draws() >> 11) * 0x1p-53;
      cpu_->SampleTokens(logits.data(), rows, vocab, params.data(), history.data(),
                         expected.data());
      DeviceBuffer cuda_logits = UploadF32(logits);
      DeviceBuffer cuda_params = Upload(params.data(), params.size() * sizeof(TokenSampling));
      DeviceBuffer cuda_history = UploadInts(history);
      DeviceBuffer tokens = UploadInts(std::vector<int32_t>(rows, -2));
      cuda_->SampleTokens(cuda_logits.as<float>(), rows, vocab, cuda_params.as<TokenSampling>(),
                          cuda_history.as<int32_t>(), tokens.as<int32_t>());
      std::vector<int32_t> actual(rows);
      ASSERT_TRUE(cuda_->CopyToHost(actual.data(), tokens.data(), rows * sizeof(int32_t)).ok());
      EXPECT_EQ(actual, expected) << "vocab " << vocab << " trial " << trial;
    }
    EXPECT_EQ(expected[0], 3);
    EXPECT_EQ(expected[9], -1);
    EXPECT_EQ(expected[10], -1);
  }
}

// A batch of sequences over a shuffled paged cache: each sequence's kv_len tokens, of which the
// last q_len are this step's query rows.
struct AttentionCase {
  const char* name;
  int32_t num_heads, num_kv_heads, head_dim, block_tokens;
  std::vector<int32_t> kv_lens, q_lens;
};

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

class CudaAttentionTest : public CudaOpsTest,
                          public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(CudaAttentionTest, AppendAndAttendMatchCpu) {
  const AttentionCase& c = GetParam();
  const int32_t seqs = static_cast<int32_t>(c.kv_lens.size());
  PagedKvLayout layout{
      .block_tokens = c.block_tokens, .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim};
  int32_t max_blocks = 0;
  int32_t total_blocks = 0;
  for (const int32_t len : c.kv_lens) {
    const int32_t blocks = (len + c.block_tokens - 1) / c.block_tokens;
    max_blocks = std::max(max_blocks, blocks);
    total_blocks += blocks;
  }
  // Blocks handed out in a shuffled order; unused table entries stay -1.
  std::vector<int32_t> order(total_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(51));
  std::vector<int32_t> tables(seqs * max_blocks, -1);
  for (int32_t s = 0, next = 0; s < seqs; ++s) {
    for (int32_t b = 0; b * c.block_tokens < c.kv_lens[s]; ++b)
      tables[s * max_blocks + b] = order[next++];
  }

  // Every token's K/V as fp32 rows [kv_heads * head_dim], appended in one call per cache.
  const int32_t kv_width = c.num_kv_heads * c.head_dim;
  std::vector<int32_t> all_offsets = {0};
  for (const int32_t len : c.kv_lens) all_offsets.push_back(all_offsets.back() + len);
  const int32_t all_rows = all_offsets.back();
  const std::vector<float> k = RoundToBf16(RandomValues(all_rows * kv_width, 52));
  const std::vector<float> v = RoundToBf16(RandomValues(all_rows * kv_width, 53));
  const int64_t cache_elems = int64_t{total_blocks} * layout.block_elems();
  std::vector<float> cpu_cache(cache_elems, 0.0f);
  PagedKvBatch cpu_kv{.blocks = cpu_cache.data(),
                      .layout = layout,
                      .num_seqs = seqs,
                      .max_blocks_per_seq = max_blocks,
                      .block_tables = tables.data(),
                      .kv_lens = c.kv_lens.data(),
                      .q_offsets = all_offsets.data()};
  cpu_->AppendKv(k.data(), v.data(), kv_width, WithHostCounts(cpu_kv));

  layout.type = DType::kBF16;
  DeviceBuffer cuda_cache = UploadBf16(std::vector<float>(cache_elems, 0.0f));
  DeviceBuffer cuda_tables = UploadInts(tables);
  DeviceBuffer cuda_lens = UploadInts(c.kv_lens);
  DeviceBuffer cuda_all_offsets = UploadInts(all_offsets);
  DeviceBuffer cuda_k = UploadF32(k);
  DeviceBuffer cuda_v = UploadF32(v);
  PagedKvBatch cuda_kv = WithHostCounts(cpu_kv);
  cuda_kv.blocks = cuda_cache.data();
  cuda_kv.layout = layout;
  cuda_kv.block_tables = cuda_tables.as<int32_t>();
  cuda_kv.kv_lens = cuda_lens.as<int32_t>();
  cuda_kv.q_offsets = cuda_all_offsets.as<int32_t>();
  cuda_->AppendKv(cuda_k.as<float>(), cuda_v.as<float>(), kv_width, cuda_kv);
  EXPECT_EQ(DownloadBf16(cuda_cache, cache_elems), cpu_cache);

  // The query rows: the last q_len positions of each sequence.
  std::vector<int32_t> q_offsets = {0};
  for (const int32_t len : c.q_lens) q_offsets.push_back(q_offsets.back() + len);
  const int32_t rows = q_offsets.back();
  const int64_t q_stride = int64_t{c.num_heads} * c.head_dim + 2 * kv_width;  // as in QKV rows
  const std::vector<float> q = RandomValues(rows * q_stride, 54, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  cpu_kv.q_offsets = q_offsets.data();
  std::vector<float> expected = Poisoned(rows * c.num_heads * c.head_dim);
  cpu_->Attention(q.data(), q_stride, c.num_heads, WithHostCounts(cpu_kv), scale, expected.data());

  DeviceBuffer cuda_q = UploadF32(q);
  DeviceBuffer cuda_q_offsets = UploadInts(q_offsets);
  cuda_kv = WithHostCounts(cpu_kv);
  cuda_kv.blocks = cuda_cache.data();
  cuda_kv.layout = layout;
  cuda_kv.block_tables = cuda_tables.as<int32_t>();
  cuda_kv.kv_lens = cuda_lens.as<int32_t>();
  cuda_kv.q_offsets = cuda_q_offsets.as<int32_t>();
  DeviceBuffer out = PoisonedBf16(expected.size());
  cuda_->Attention(cuda_q.as<float>(), q_stride, c.num_heads, cuda_kv, scale, out.data());
  EXPECT_LT(RelativeError(DownloadBf16(out, expected.size()), expected), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Batches, CudaAttentionTest,
    ::testing::Values(
        AttentionCase{"decode_gqa4_d128", 32, 8, 128, 32, {1, 33, 4100, 700}, {1, 1, 1, 1}},
        AttentionCase{"decode_gqa3_d64_long", 9, 3, 64, 32, {16384, 5}, {1, 1}},
        AttentionCase{"decode_mha_d64_block16", 4, 4, 64, 16, {300, 2}, {1, 1}},
        AttentionCase{"decode_gqa7_d128", 28, 4, 128, 32, {1000}, {1}},
        AttentionCase{"decode_mqa8_d128", 8, 1, 128, 16, {2049, 64}, {1, 1}},
        AttentionCase{"decode_mqa16_d64", 16, 1, 64, 32, {777, 3}, {1, 1}},
        AttentionCase{"prefill_gqa4_d128", 8, 2, 128, 32, {200, 65}, {200, 65}},
        AttentionCase{"chunk_after_cache_d64", 9, 3, 64, 32, {1000, 130}, {129, 1}},
        AttentionCase{"prefill_gqa4_d128_block7", 4, 1, 128, 7, {150}, {150}},
        AttentionCase{"mixed_d128", 16, 8, 128, 32, {1, 500, 70, 3000}, {1, 64, 70, 1}},
        AttentionCase{"prefill_gqa8_d64", 16, 2, 64, 16, {300, 40}, {300, 33}},
        AttentionCase{"chunk_after_cache_gqa2_d128", 4, 2, 128, 32, {1100, 90}, {257, 90}}));

// Head-wise sparse decode: every KV head of a sequence reads its own blocks (table_heads).
TEST_F(CudaOpsTest, PerHeadTablesMatchCpu) {
  for (const int32_t head_dim : {64, 128}) {
    PagedKvLayout layout{.block_tokens = 32, .num_kv_heads = 4, .head_dim = head_dim};
    constexpr int32_t kHeads = 16;
    constexpr int32_t kSeqs = 3;
    constexpr int32_t kBlocks = 200;
    const int64_t cache_elems = kBlocks * layout.block_elems();
    const std::vector<float> cache = RoundToBf16(RandomValues(cache_elems, 81 + head_dim));
    // Per (sequence, KV head): a random subset of blocks in increasing order, the last partial.
    std::mt19937 rng(82);
    const int32_t max_blocks = 40;
    std::vector<int32_t> tables(kSeqs * layout.num_kv_heads * max_blocks, -1);
    std::vector<int32_t> kv_lens(kSeqs * layout.num_kv_heads);
    int32_t max_kv_len = 0;
    for (size_t row = 0; row < kv_lens.size(); ++row) {
      std::vector<int32_t> pool(kBlocks);
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng);
      const int32_t count = 1 + static_cast<int32_t>(rng() % max_blocks);
      std::sort(pool.begin(), pool.begin() + count);
      std::copy(pool.begin(), pool.begin() + count, tables.begin() + row * max_blocks);
      kv_lens[row] = (count - 1) * layout.block_tokens + 1 + static_cast<int32_t>(rng() % 32);
      max_kv_len = std::max(max_kv_len, kv_lens[row]);
    }
    const std::vector<int32_t> q_offsets = {0, 1, 2, 3};
    const int64_t q_stride = int64_t{kHeads} * head_dim;
    const std::vector<float> q = RandomValues(kSeqs * q_stride, 83);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    PagedKvBatch cpu_kv{.blocks = const_cast<float*>(cache.data()),
                        .layout = layout,
                        .num_seqs = kSeqs,
                        .max_blocks_per_seq = max_blocks,
                        .block_tables = tables.data(),
                        .kv_lens = kv_lens.data(),
                        .q_offsets = q_offsets.data(),
                        .num_rows = kSeqs,
                        .max_q_len = 1,
                        .max_kv_len = max_kv_len,
                        .table_heads = layout.num_kv_heads};
    std::vector<float> expected = Poisoned(kSeqs * q_stride);
    cpu_->Attention(q.data(), q_stride, kHeads, cpu_kv, scale, expected.data());

    layout.type = DType::kBF16;
    DeviceBuffer cuda_cache = UploadBf16(cache);
    DeviceBuffer cuda_tables = UploadInts(tables);
    DeviceBuffer cuda_lens = UploadInts(kv_lens);
    DeviceBuffer cuda_offsets = UploadInts(q_offsets);
    DeviceBuffer cuda_q = UploadF32(q);
    PagedKvBatch cuda_kv = cpu_kv;
    cuda_kv.blocks = cuda_cache.data();
    cuda_kv.layout = layout;
    cuda_kv.block_tables = cuda_tables.as<int32_t>();
    cuda_kv.kv_lens = cuda_lens.as<int32_t>();
    cuda_kv.q_offsets = cuda_offsets.as<int32_t>();
    DeviceBuffer out = PoisonedBf16(expected.size());
    cuda_->Attention(cuda_q.as<float>(), q_stride, kHeads, cuda_kv, scale, out.data());
    EXPECT_LT(RelativeError(DownloadBf16(out, expected.size()), expected), kBf16Tolerance)
        << head_dim;
  }
}

}  // namespace
}  // namespace pulse
