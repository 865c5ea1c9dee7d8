// How decode attention splits sequences (host arithmetic, no device needed), at the shapes the
// H200 split sweep measured (samples/bench/results/history.jsonl, source
// h200-cuda-ops-69b90ea.jsonl): 132 SMs holding
// 3 blocks each (396 at once), at most 8 blocks an SM. The sweep ran fixed block targets; its
// fastest for each shape was a well-filled last wave with few splits: 8x16384 at 92% of its
// floor with 5 splits (one wave of 320 blocks) against 85% with 17 (2.7 waves), 32x8192 at 98%
// with 3 (768 blocks, 1.94 waves) against 88% with 5, 16x32768 at 102% with 3 or 9. The rule
// picks 6 for 8x16384 (384 blocks, one wave), which the sweep did not run.
#include <cstdint>

#include "core/backend/cuda/kernels.h"
#include "gtest/gtest.h"

namespace pulse::cuda {
namespace {

constexpr int64_t kResident = 132 * 3;
constexpr int64_t kMaxBlocks = 132 * 8;

// Llama-3.1-8B's attention: 32 query heads over 8 KV heads of 128 dims.
int32_t Splits(int32_t seqs, int32_t context) {
  PagedKvBatch kv;
  kv.layout = {.block_tokens = 32, .num_kv_heads = 8, .head_dim = 128, .type = DType::kBF16};
  kv.num_seqs = seqs;
  kv.max_kv_len = context;
  return DecodeAttentionSplits(kv, 32, kResident, kMaxBlocks);
}

TEST(DecodeAttentionSplits, FillTheLastWaveWithTheFewestSplits) {
  EXPECT_EQ(Splits(8, 16384), 6);   // 384 blocks: 97% of one wave
  EXPECT_EQ(Splits(32, 8192), 3);   // 768: 97% of two waves
  EXPECT_EQ(Splits(16, 32768), 3);  // 384: one wave (6 and 9 fill as well, with more merging)
}

TEST(DecodeAttentionSplits, ShortSequencesAndLargeBatchesSplitLess) {
  // One sequence cannot fill a wave: as many splits as 256-token pieces allow.
  EXPECT_EQ(Splits(1, 4096), 16);
  EXPECT_EQ(Splits(1, 100), 1);
  // 128 sequences are 1024 blocks unsplit (2.6 waves); two splits fill no better.
  EXPECT_EQ(Splits(128, 32768), 1);
}

TEST(DecodeAttentionSplits, DegenerateInputsGiveOneSplit) {
  EXPECT_EQ(Splits(0, 0), 1);
  PagedKvBatch kv;
  kv.layout = {.block_tokens = 32, .num_kv_heads = 8, .head_dim = 128, .type = DType::kBF16};
  kv.num_seqs = 4;
  kv.max_kv_len = 8192;
  EXPECT_EQ(DecodeAttentionSplits(kv, 32, 0, 0), 1);
}

}  // namespace
}  // namespace pulse::cuda
