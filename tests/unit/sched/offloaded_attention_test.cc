// Offloaded sparse decode through the ModelRunner on the CPU backend (its copy engine is a
// thread, so recall and write-back really run beside compute): every full block is written back
// to the host tier once, blocks that are not resident are recalled into device slots through the
// device-side directory, and the result is bitwise what the same selection gives with every
// block resident. No step waits for the device but to read its logits. Capacity faults and
// malformed batches give statuses and leave the runner usable.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backend/block_estimator.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/reference/fp8_kv_block.h"
#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/offload/sparse_attention.h"
#include "gtest/gtest.h"
#include "tests/unit/bitwise_logits.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::ExpectBitwiseEqual;
using ::pulse::testing::Prompt;
using ::pulse::testing::TinyConfig;
using ::pulse::testing::TinyModel;

constexpr int32_t kBlockTokens = 4;
constexpr int32_t kBlocksPerSeq = 40;  // 160 tokens
constexpr int32_t kDenseBlocks = 2 * kBlocksPerSeq;

// A runner over a cache of kDenseBlocks dense blocks (and the slots of `offload`'s tiers). The
// default: sparse selection over resident blocks only, no host tier.
ModelRunner MakeRunner(std::shared_ptr<const Model> model, const OffloadConfig& offload = {}) {
  const ModelConfig& config = model->config();
  const auto slots =
      static_cast<int32_t>(offload.host_tokens > 0 ? offload.slot_tokens : 0) / kBlockTokens;
  KvCache cache = *KvCache::Create(model->backend(),
                                   {.block_tokens = kBlockTokens,
                                    .num_kv_heads = config.num_kv_heads,
                                    .head_dim = config.head_dim},
                                   config.num_layers, kDenseBlocks + slots);
  absl::StatusOr<ModelRunner> runner = ModelRunner::Create(std::move(model), std::move(cache),
                                                           {.max_step_tokens = 160,
                                                            .max_seqs = 2,
                                                            .max_blocks_per_seq = kBlocksPerSeq,
                                                            .offload = offload});
  EXPECT_TRUE(runner.ok()) << runner.status();
  return *std::move(runner);
}

// Both tiers: two sequences' worth of host blocks, `slots` device slots.
OffloadConfig Offload(SelectionMode mode, int32_t slots, EvictionKind eviction = EvictionKind::kLru,
                      const BlockEstimator& estimator = OffloadConfig{}.estimator) {
  return {.selection = {.mode = mode},
          .estimator = estimator,
          .host_tokens = 2 * kBlocksPerSeq * kBlockTokens,
          .slot_tokens = slots * kBlockTokens,
          .eviction = eviction};
}

// Sparse selection with `estimator` over resident blocks only.
OffloadConfig Resident(const BlockEstimator& estimator) {
  OffloadConfig offload;
  offload.estimator = estimator;
  return offload;
}

// Every kind of estimator: key boxes at either radius, finer boxes rounded to bf16, and every key
// scored at int8 and at int4, a block by its best key and by all of them (log-sum-exp).
std::vector<BlockEstimator> Estimators() {
  std::vector<BlockEstimator> estimators;
  for (const char* name : {"box-r0", "box-r1", "boxes2-r0.5-bf16", "tokens-r0-int8",
                           "tokens-r0-int4", "tokens-r0-int4-lse"}) {
    estimators.push_back(*ParseEstimator(name));
  }
  return estimators;
}

SparseSelection Selection(SelectionMode mode, int32_t budget, uint64_t key = 1) {
  return {.options = {.mode = mode,
                      .budget_tokens = budget,
                      .sink_tokens = kBlockTokens,
                      .window_tokens = 2 * kBlockTokens},
          .key = key};
}

// A sequence of a decode run: its tokens, selection, device blocks [first_block, +40) and, when
// offloaded, host blocks [first_host, +40).
struct DecodeSequence {
  const std::vector<int32_t>& tokens;
  SparseSelection sparse;
  int32_t first_block = 0;
  std::optional<int32_t> first_host;
};

// The decode steps of DecodeAll from position `prompt` on, over each sequence's `blocks` (dropped
// from as the window moves, when it is offloaded) and `host` blocks.
std::vector<std::vector<float>> DecodeFrom(ModelRunner& runner,
                                           const std::vector<DecodeSequence>& sequences,
                                           std::vector<std::vector<int32_t>>& blocks,
                                           const std::vector<std::vector<int32_t>>& host,
                                           int32_t prompt, int32_t decode) {
  StepBatch batch;
  std::vector<std::vector<float>> logits;
  for (int32_t i = prompt; i < prompt + decode; ++i) {
    batch.Clear();
    for (size_t s = 0; s < sequences.size(); ++s) {
      if (sequences[s].first_host) {
        const BlockRange evicted = NonResidentBlocks(i, kBlockTokens, sequences[s].sparse.options);
        for (int32_t j = evicted.begin; j < evicted.end; ++j) {
          blocks[s][static_cast<size_t>(j)] = -1;
        }
      }
      batch.AddSequence(std::span<const int32_t>(sequences[s].tokens).subspan(i, 1), i, blocks[s],
                        LogitRows::kLast, sequences[s].sparse, host[s]);
    }
    logits.emplace_back(sequences.size() * TinyConfig().vocab_size);
    const absl::Status status = runner.Forward(batch, logits.back());
    EXPECT_TRUE(status.ok()) << status;
  }
  return logits;
}

// Each sequence's prompt (all but `decode` of its tokens) in a step of its own, then `decode`
// steps of one token for every sequence; returns the decode steps' logits ([sequence][vocab]).
// Offloaded, before each decode step the blocks that are neither sinks, nor window, nor written
// to are dropped from the device table, as the engine frees them.
std::vector<std::vector<float>> DecodeAll(ModelRunner& runner,
                                          const std::vector<DecodeSequence>& sequences,
                                          int32_t decode) {
  std::vector<std::vector<int32_t>> blocks;
  std::vector<std::vector<int32_t>> host;
  for (const DecodeSequence& sequence : sequences) {
    blocks.emplace_back(kBlocksPerSeq);
    std::iota(blocks.back().begin(), blocks.back().end(), sequence.first_block);
    host.emplace_back();
    if (sequence.first_host) {
      host.back().resize(kBlocksPerSeq);
      std::iota(host.back().begin(), host.back().end(), *sequence.first_host);
    }
  }
  const int32_t prompt = static_cast<int32_t>(sequences[0].tokens.size()) - decode;
  StepBatch batch;
  std::vector<float> none;
  for (size_t s = 0; s < sequences.size(); ++s) {
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(sequences[s].tokens).first(prompt), 0, blocks[s],
                      LogitRows::kNone, sequences[s].sparse, host[s]);
    const absl::Status prefilled = runner.Forward(batch, none);
    EXPECT_TRUE(prefilled.ok()) << prefilled;
  }
  return DecodeFrom(runner, sequences, blocks, host, prompt, decode);
}

// One sequence (see DecodeAll).
std::vector<std::vector<float>> Decode(ModelRunner& runner, const std::vector<int32_t>& tokens,
                                       int32_t decode, const SparseSelection& sparse,
                                       int32_t first_block, std::optional<int32_t> first_host) {
  return DecodeAll(runner, {{tokens, sparse, first_block, first_host}}, decode);
}

TEST(OffloadedAttentionTest, ABudgetCoveringTheContextIsDenseAttentionBitwise) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 21);
  ModelRunner dense_runner = MakeRunner(model);
  const auto dense = Decode(dense_runner, tokens, 20, Selection(SelectionMode::kSoloHead, 1 << 20),
                            0, std::nullopt);
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    for (const BlockEstimator& estimator : Estimators()) {
      SCOPED_TRACE(
          absl::StrCat(static_cast<int>(mode), " ", EstimatorName(estimator, kBlockTokens)));
      ModelRunner runner =
          MakeRunner(model, Offload(mode, kBlocksPerSeq, EvictionKind::kLru, estimator));
      ExpectBitwiseEqual(Decode(runner, tokens, 20, Selection(mode, 1 << 20), 0, 5), dense);
      const OffloadStats stats = runner.offload_stats();
      const int64_t layers = TinyConfig().num_layers;
      // 130 prompt tokens fill 32 blocks, the 20 decoded tokens fill 5 more (the last token's KV
      // is at position 149: blocks through 37 are full).
      EXPECT_EQ(stats.writeback_blocks, layers * 37);
      EXPECT_GT(stats.recall_bytes, 0);
      EXPECT_GT(stats.cache.hits, 0);
      EXPECT_EQ(stats.cache.misses * (mode == SelectionMode::kSoloHead ? 1 : 2),
                stats.recall_chunks);
      EXPECT_EQ(stats.cache.evictions, 0);
      EXPECT_GT(stats.recall_seconds, 0.0);
    }
  }
}

// Whether the first `tokens` tokens of block `a` and block `b` of `layout` hold the same keys and
// values.
bool SameTokens(const void* a, const void* b, const PagedKvLayout& layout, int32_t tokens) {
  const size_t row = static_cast<size_t>(layout.head_dim) * DTypeBytes(layout.type);
  for (int32_t part = 0; part < 2 * layout.num_kv_heads; ++part) {
    const size_t offset = static_cast<size_t>(part) * layout.block_tokens * row;
    if (std::memcmp(static_cast<const char*>(a) + offset, static_cast<const char*>(b) + offset,
                    static_cast<size_t>(tokens) * row) != 0) {
      return false;
    }
  }
  return true;
}

// A prompt prefilled staged (no block resident: each chunk recalls the earlier chunks' KV a
// layer at a time into the staging area) gives each chunk's last logits of the prompt prefilled
// with its blocks resident, bit for bit, and leaves every block, the partial last one too, in the
// host tier as the dense cache holds it. Its sinks and window recalled into device blocks, it
// then decodes as the dense sequence does.
TEST(OffloadedAttentionTest, AStagedPromptIsTheResidentPrefillBitwise) {
  std::shared_ptr<const Model> model = TinyModel();
  const int32_t vocab = TinyConfig().vocab_size;
  const int32_t layers = TinyConfig().num_layers;
  const std::vector<int32_t> tokens = Prompt(150, vocab, 23);
  constexpr int32_t kPrompt = 130;
  constexpr int32_t kChunk = 37;  // chunks end inside blocks
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(static_cast<int>(mode));
    ModelRunner dense_runner = MakeRunner(model);
    ModelRunner runner = MakeRunner(model, Offload(mode, kBlocksPerSeq));
    std::vector<std::vector<int32_t>> blocks(1, std::vector<int32_t>(kBlocksPerSeq));
    std::vector<std::vector<int32_t>> host(1, std::vector<int32_t>(kBlocksPerSeq));
    std::iota(blocks[0].begin(), blocks[0].end(), 0);
    std::iota(host[0].begin(), host[0].end(), 7);
    StepBatch batch;
    for (int32_t begin = 0; begin < kPrompt; begin += kChunk) {
      const int32_t count = std::min(kChunk, kPrompt - begin);
      const std::span<const int32_t> chunk = std::span<const int32_t>(tokens).subspan(
          static_cast<size_t>(begin), static_cast<size_t>(count));
      const auto written = static_cast<size_t>((begin + count + kBlockTokens - 1) / kBlockTokens);
      std::vector<std::vector<float>> expected(1, std::vector<float>(vocab));
      std::vector<std::vector<float>> staged(1, std::vector<float>(vocab));
      batch.Clear();
      batch.AddSequence(chunk, begin, std::span<const int32_t>(blocks[0]).first(written),
                        LogitRows::kLast);
      ASSERT_TRUE(dense_runner.Forward(batch, expected[0]).ok());
      batch.Clear();
      batch.AddStagedSequence(chunk, begin, std::span<const int32_t>(host[0]).first(written),
                              LogitRows::kLast);
      const absl::Status status = runner.Forward(batch, staged[0]);
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_EQ(runner.step_host_waits(), 0);
      ExpectBitwiseEqual(staged, expected);
    }
    const PagedKvLayout& layout = dense_runner.cache().layout();
    for (int32_t layer = 0; layer < layers; ++layer) {
      for (int32_t j = 0; j * kBlockTokens < kPrompt; ++j) {
        EXPECT_TRUE(SameTokens(
            runner.host_tier()->block(layer, host[0][static_cast<size_t>(j)]),
            static_cast<const char*>(dense_runner.cache().layer(layer)) + j * layout.block_bytes(),
            layout, std::min(kBlockTokens, kPrompt - j * kBlockTokens)))
            << "layer " << layer << " block " << j;
      }
    }
    const StagedPrefillStats stats = runner.offload_stats().staged;
    EXPECT_EQ(stats.chunks, 4);
    EXPECT_EQ(stats.filled_blocks, layers * (kPrompt / kBlockTokens));
    // Chunks 2 to 4 recall the 10, 19 and 28 blocks before them in every layer.
    EXPECT_EQ(stats.recall_bytes, layers * (10 + 19 + 28) * layout.block_bytes());
    EXPECT_EQ(runner.offload_stats().writeback_blocks, 0);

    // Its resident set (sinks, window, the block written next) recalled; the rest stays in the
    // host tier.
    const SparseSelection selection = Selection(mode, 1 << 20);
    const BlockRange away = NonResidentBlocks(kPrompt, kBlockTokens, selection.options);
    std::vector<int32_t> resident_host;
    std::vector<int32_t> resident_device;
    for (int32_t j = 0; j * kBlockTokens < kPrompt; ++j) {
      if (j >= away.begin && j < away.end) continue;
      resident_host.push_back(host[0][static_cast<size_t>(j)]);
      resident_device.push_back(blocks[0][static_cast<size_t>(j)]);
    }
    ASSERT_TRUE(runner.MoveToDevice(resident_host, resident_device).ok());
    std::vector<std::vector<int32_t>> dense_blocks = blocks;
    const auto dense = DecodeFrom(dense_runner, {{tokens, selection, 0, std::nullopt}},
                                  dense_blocks, {{}}, kPrompt, 20);
    ExpectBitwiseEqual(DecodeFrom(runner, {{tokens, selection, 0, 7}}, blocks, host, kPrompt, 20),
                       dense);
  }
}

// Staged chunks of prompts that share their first host blocks (a cached prefix) run in one step:
// a shared block takes one staging block and is recalled once a layer, and each chunk gets the
// logits, and leaves in the host tier the blocks, it gets in a step of its own, bit for bit.
TEST(OffloadedAttentionTest, StagedChunksSharingAPrefixRunInOneStepAsEachDoesAlone) {
  std::shared_ptr<const Model> model = TinyModel();
  const int32_t vocab = TinyConfig().vocab_size;
  const int32_t layers = TinyConfig().num_layers;
  constexpr int32_t kDocument = 64;  // 16 full blocks
  constexpr int32_t kQuestion = 21;  // ends inside a block
  constexpr int32_t kDocumentBlocks = kDocument / kBlockTokens;
  const std::vector<int32_t> document = Prompt(kDocument, vocab, 31);
  std::vector<std::vector<int32_t>> questions;
  std::vector<std::vector<int32_t>> host(2);  // the document's blocks 7 to 22, then each its own
  for (int32_t q = 0; q < 2; ++q) {
    questions.push_back(Prompt(kQuestion, vocab, 40 + q));
    for (int32_t j = 0; j < kDocumentBlocks; ++j) host[q].push_back(7 + j);
    for (int32_t j = 0; j * kBlockTokens < kQuestion; ++j) host[q].push_back(30 + 10 * q + j);
  }
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(static_cast<int>(mode));
    ModelRunner alone = MakeRunner(model, Offload(mode, kBlocksPerSeq));
    ModelRunner together = MakeRunner(model, Offload(mode, kBlocksPerSeq));
    StepBatch batch;
    std::vector<float> none;
    for (ModelRunner* runner : {&alone, &together}) {
      batch.Clear();
      batch.AddStagedSequence(document, 0, std::span<const int32_t>(host[0]).first(kDocumentBlocks),
                              LogitRows::kNone);
      ASSERT_TRUE(runner->Forward(batch, none).ok());
    }
    std::vector<float> expected(static_cast<size_t>(2 * vocab));
    for (int32_t q = 0; q < 2; ++q) {
      batch.Clear();
      batch.AddStagedSequence(questions[static_cast<size_t>(q)], kDocument,
                              host[static_cast<size_t>(q)], LogitRows::kLast);
      const absl::Status status =
          alone.Forward(batch, std::span<float>(expected).subspan(static_cast<size_t>(q * vocab),
                                                                  static_cast<size_t>(vocab)));
      ASSERT_TRUE(status.ok()) << status;
    }
    batch.Clear();
    for (int32_t q = 0; q < 2; ++q) {
      batch.AddStagedSequence(questions[static_cast<size_t>(q)], kDocument,
                              host[static_cast<size_t>(q)], LogitRows::kLast);
    }
    std::vector<float> got(expected.size());
    const absl::Status status = together.Forward(batch, got);
    ASSERT_TRUE(status.ok()) << status;
    ExpectBitwiseEqual({got}, {expected});

    const PagedKvLayout& layout = together.cache().layout();
    for (int32_t layer = 0; layer < layers; ++layer) {
      for (int32_t q = 0; q < 2; ++q) {
        for (int32_t j = kDocumentBlocks; j < static_cast<int32_t>(host[0].size()); ++j) {
          const int32_t block = host[static_cast<size_t>(q)][static_cast<size_t>(j)];
          EXPECT_TRUE(SameTokens(together.host_tier()->block(layer, block),
                                 alone.host_tier()->block(layer, block), layout,
                                 std::min(kBlockTokens, kDocument + kQuestion - j * kBlockTokens)))
              << "layer " << layer << " question " << q << " block " << j;
        }
      }
    }
    // Alone, each question's chunk recalls the document's 16 blocks in every layer; together,
    // one recall serves both.
    EXPECT_EQ(alone.offload_stats().staged.recall_bytes,
              2 * layers * kDocumentBlocks * layout.block_bytes());
    EXPECT_EQ(together.offload_stats().staged.recall_bytes,
              layers * kDocumentBlocks * layout.block_bytes());
    EXPECT_EQ(together.offload_stats().staged.chunks, 3);
    EXPECT_EQ(together.offload_stats().staged.filled_blocks,
              layers * (kDocumentBlocks + 2 * (kQuestion / kBlockTokens)));

    // A staged chunk beside one that is not, and two chunks writing one host block, are refused.
    batch.Clear();
    batch.AddStagedSequence(questions[0], kDocument, host[0], LogitRows::kLast);
    batch.AddStagedSequence(questions[1], kDocument, host[0], LogitRows::kLast);
    EXPECT_EQ(together.Forward(batch, got).code(), absl::StatusCode::kInvalidArgument);
    batch.Clear();
    batch.AddStagedSequence(questions[0], kDocument, host[0], LogitRows::kLast);
    std::vector<int32_t> dense_blocks(host[1].size());
    std::iota(dense_blocks.begin(), dense_blocks.end(), 0);
    batch.AddSequence(questions[1], kDocument, dense_blocks, LogitRows::kLast);
    EXPECT_EQ(together.Forward(batch, got).code(), absl::StatusCode::kInvalidArgument);
  }
}

// With an fp8 host tier (OffloadConfig::host_codec) a staged prompt's blocks are stored encoded:
// layer 0's, whose keys and values depend on the tokens alone, are the encodings of the dense
// cache's blocks; each chunk's recall reads encodings (a quarter of an f32 block's bytes); and
// blocks moved back to the device are the decodings of the host tier's.
TEST(OffloadedAttentionTest, AnFp8HostTierKeepsAStagedPromptEncodedAndMovesItBackDecoded) {
  std::shared_ptr<const Model> model = TinyModel();
  const int32_t layers = TinyConfig().num_layers;
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 23);
  constexpr int32_t kPrompt = 130;
  constexpr int32_t kChunk = 37;
  ModelRunner dense_runner = MakeRunner(model);
  OffloadConfig fp8 = Offload(SelectionMode::kSoloHead, kBlocksPerSeq);
  fp8.host_codec = HostCodec::kFp8E4m3;
  ModelRunner runner = MakeRunner(model, fp8);
  std::vector<int32_t> blocks(kBlocksPerSeq);
  std::vector<int32_t> host(kBlocksPerSeq);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::iota(host.begin(), host.end(), 7);
  StepBatch batch;
  std::vector<float> none;
  for (int32_t begin = 0; begin < kPrompt; begin += kChunk) {
    const int32_t count = std::min(kChunk, kPrompt - begin);
    const std::span<const int32_t> chunk =
        std::span<const int32_t>(tokens).subspan(static_cast<size_t>(begin), count);
    const auto written = static_cast<size_t>((begin + count + kBlockTokens - 1) / kBlockTokens);
    batch.Clear();
    batch.AddSequence(chunk, begin, std::span<const int32_t>(blocks).first(written),
                      LogitRows::kNone);
    ASSERT_TRUE(dense_runner.Forward(batch, none).ok());
    batch.Clear();
    batch.AddStagedSequence(chunk, begin, std::span<const int32_t>(host).first(written),
                            LogitRows::kNone);
    const absl::Status status = runner.Forward(batch, none);
    ASSERT_TRUE(status.ok()) << status;
  }
  const PagedKvLayout& layout = dense_runner.cache().layout();
  const int64_t block_bytes = layout.block_bytes();
  const int64_t encoded_bytes = HostBlockBytes(layout, HostCodec::kFp8E4m3);
  const auto encoded = [&](int32_t layer, int32_t j) {
    return std::span(reinterpret_cast<const std::byte*>(
                         runner.host_tier()->block(layer, host[static_cast<size_t>(j)])),
                     static_cast<size_t>(encoded_bytes));
  };
  // The full blocks but those a chunk ends inside (9, 18 and 27), which the next chunk recalls,
  // completes and encodes again: their first tokens go through fp8 twice.
  for (int32_t j = 0; j < kPrompt / kBlockTokens; ++j) {
    if ((j + 1) * kBlockTokens % kChunk < kBlockTokens && (j + 1) * kBlockTokens % kChunk != 0) {
      continue;
    }
    std::vector<std::byte> want(static_cast<size_t>(encoded_bytes));
    EncodeFp8KvBlock(
        layout,
        std::span(static_cast<const std::byte*>(dense_runner.cache().layer(0)) + j * block_bytes,
                  static_cast<size_t>(block_bytes)),
        want);
    const std::span<const std::byte> got = encoded(0, j);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "block " << j;
  }
  // Chunks 2 to 4 recall the 10, 19 and 28 blocks before them in every layer.
  EXPECT_EQ(runner.offload_stats().staged.recall_bytes, layers * (10 + 19 + 28) * encoded_bytes);

  const std::vector<int32_t> moved_host = {host[0], host[5], host[31]};
  const std::vector<int32_t> moved_device = {40, 41, 42};
  ASSERT_TRUE(runner.MoveToDevice(moved_host, moved_device).ok());
  for (int32_t layer = 0; layer < layers; ++layer) {
    for (size_t i = 0; i < moved_host.size(); ++i) {
      std::vector<std::byte> want(static_cast<size_t>(block_bytes));
      DecodeFp8KvBlock(layout, encoded(layer, moved_host[i] - 7), want);
      EXPECT_EQ(std::memcmp(static_cast<const char*>(runner.cache().layer(layer)) +
                                moved_device[i] * block_bytes,
                            want.data(), want.size()),
                0)
          << "layer " << layer << " block " << moved_device[i];
    }
  }
}

TEST(OffloadedAttentionTest, ASmallBudgetGivesTheResidentSelectionBitwiseAndEvicts) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 22);
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    for (const EvictionKind eviction : {EvictionKind::kLru, EvictionKind::kScoreAware}) {
      SCOPED_TRACE(static_cast<int>(mode) * 2 + static_cast<int>(eviction));
      ModelRunner resident_runner = MakeRunner(model);
      const auto resident =
          Decode(resident_runner, tokens, 30, Selection(mode, 32), 0, std::nullopt);
      // 32 tokens: 4 or 5 picks a step; 6 slots must evict as the picks change.
      ModelRunner runner = MakeRunner(model, Offload(mode, 6, eviction));
      ExpectBitwiseEqual(Decode(runner, tokens, 30, Selection(mode, 32), 3, 0), resident);
      const OffloadStats stats = runner.offload_stats();
      EXPECT_GT(stats.cache.hits, 0);
      EXPECT_GT(stats.cache.misses, 0);
      EXPECT_GT(stats.cache.evictions, 0);
      EXPECT_EQ(runner.sparse_stats(1).picked_blocks, runner.sparse_stats().picked_blocks);
      EXPECT_GT(runner.sparse_stats().reused_blocks, 0);
      EXPECT_LT(runner.sparse_stats().reused_blocks, runner.sparse_stats().picked_blocks);
      // The host waited for the device only to read the logits.
      EXPECT_EQ(runner.step_host_waits(), 0);
    }
  }
}

// Each estimator picks its own blocks (the logits differ from the other estimators'), and the
// offloaded path gives bitwise what the same estimator gives with every block resident.
TEST(OffloadedAttentionTest, EachEstimatorsSelectionOffloadedIsItsResidentSelectionBitwise) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 25);
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    std::vector<std::vector<std::vector<float>>> residents;
    for (const BlockEstimator& estimator : Estimators()) {
      SCOPED_TRACE(
          absl::StrCat(static_cast<int>(mode), " ", EstimatorName(estimator, kBlockTokens)));
      ModelRunner resident_runner = MakeRunner(model, Resident(estimator));
      residents.push_back(
          Decode(resident_runner, tokens, 20, Selection(mode, 32), 0, std::nullopt));
      ModelRunner runner = MakeRunner(model, Offload(mode, 6, EvictionKind::kLru, estimator));
      ExpectBitwiseEqual(Decode(runner, tokens, 20, Selection(mode, 32), 3, 0), residents.back());
      EXPECT_EQ(runner.step_host_waits(), 0);
    }
    for (size_t a = 0; a < residents.size(); ++a) {
      for (size_t b = a + 1; b < residents.size(); ++b) {
        bool differ = false;
        for (size_t step = 0; step < residents[a].size(); ++step) {
          differ = differ || residents[a][step] != residents[b][step];
        }
        EXPECT_TRUE(differ) << "estimators " << a << " and " << b << " decode alike";
      }
    }
  }
}

// Two offloaded sequences share each layer's device tier: their picks resolve through one
// directory, and each gets what its selection gives with every block resident.
TEST(OffloadedAttentionTest, TwoSequencesSharingTheSlotsGiveTheResidentSelectionBitwise) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<std::vector<int32_t>> tokens = {Prompt(150, TinyConfig().vocab_size, 23),
                                                    Prompt(150, TinyConfig().vocab_size, 24)};
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(static_cast<int>(mode));
    ModelRunner resident = MakeRunner(model);
    const auto want = DecodeAll(resident,
                                {{tokens[0], Selection(mode, 32, 1), 0, std::nullopt},
                                 {tokens[1], Selection(mode, 32, 2), kBlocksPerSeq, std::nullopt}},
                                20);
    ModelRunner runner = MakeRunner(model, Offload(mode, 12));
    ExpectBitwiseEqual(
        DecodeAll(runner,
                  {{tokens[0], Selection(mode, 32, 1), 0, 0},
                   {tokens[1], Selection(mode, 32, 2), kBlocksPerSeq, kBlocksPerSeq}},
                  20),
        want);
    EXPECT_GT(runner.offload_stats().cache.evictions, 0);
    EXPECT_EQ(runner.step_host_waits(), 0);
  }
}

TEST(OffloadedAttentionTest, AForgottenSequencesHostBlocksServeTheNextOneWithoutStaleSlots) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> first = Prompt(150, TinyConfig().vocab_size, 23);
  const std::vector<int32_t> second = Prompt(150, TinyConfig().vocab_size, 24);
  const SelectionMode mode = SelectionMode::kSoloHead;
  ModelRunner fresh = MakeRunner(model, Offload(mode, 10));
  const auto expected = Decode(fresh, second, 20, Selection(mode, 48, 2), 0, 0);

  ModelRunner runner = MakeRunner(model, Offload(mode, 10));
  Decode(runner, first, 20, Selection(mode, 48, 1), 0, 0);
  std::vector<int32_t> host(kBlocksPerSeq);
  std::iota(host.begin(), host.end(), 0);
  ASSERT_TRUE(runner.ForgetSparse(1).ok());
  ASSERT_TRUE(runner.FreeSlots(host).ok());
  ExpectBitwiseEqual(Decode(runner, second, 20, Selection(mode, 48, 2), 0, 0), expected);
}

TEST(OffloadedAttentionTest, ADeviceTierTooSmallForTheStepIsResourceExhaustedAndHarmless) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(100, TinyConfig().vocab_size, 25);
  const SelectionMode mode = SelectionMode::kHeadWise;
  std::vector<int32_t> blocks(kBlocksPerSeq);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<int32_t> host(kBlocksPerSeq);
  std::iota(host.begin(), host.end(), 0);
  std::vector<float> none;
  // The prompt, then the last token with `budget` and blocks [1, 22) not resident (when `host`).
  const auto run = [&](ModelRunner& runner, std::span<const int32_t> host_blocks,
                       std::initializer_list<int32_t> budgets) {
    StepBatch batch;
    std::vector<int32_t> device = blocks;
    batch.AddSequence(std::span<const int32_t>(tokens).first(99), 0, device, LogitRows::kNone,
                      Selection(mode, budgets.size() > 0 ? *budgets.begin() : 0), host_blocks);
    EXPECT_TRUE(runner.Forward(batch, none).ok());
    if (!host_blocks.empty()) std::fill(device.begin() + 1, device.begin() + 22, -1);
    std::vector<absl::StatusCode> codes;
    std::vector<float> logits(TinyConfig().vocab_size);
    for (const int32_t budget : budgets) {
      batch.Clear();
      batch.AddSequence(std::span<const int32_t>(tokens).subspan(99, 1), 99, device,
                        LogitRows::kLast, Selection(mode, budget), host_blocks);
      codes.push_back(runner.Forward(batch, logits).code());
    }
    return std::pair{codes, logits};
  };
  // 64 tokens pick 13 blocks a KV head: more than 3 slots. 24 tokens pick 3.
  ModelRunner runner = MakeRunner(model, Offload(mode, 3));
  const auto [codes, logits] = run(runner, host, {64, 24});
  EXPECT_EQ(codes, (std::vector{absl::StatusCode::kResourceExhausted, absl::StatusCode::kOk}));
  // The retry with the smaller budget is what that budget gives with every block resident: the
  // slots the failed step had claimed were not taken for recalled.
  ModelRunner resident = MakeRunner(model);
  const auto [resident_codes, want] = run(resident, {}, {24});
  EXPECT_EQ(std::memcmp(logits.data(), want.data(), want.size() * sizeof(float)), 0);

  // And another sequence, dense, in the same runner.
  const std::vector<int32_t> other = Prompt(40, TinyConfig().vocab_size, 26);
  std::vector<int32_t> other_blocks(kBlocksPerSeq);
  std::iota(other_blocks.begin(), other_blocks.end(), kBlocksPerSeq);
  StepBatch batch;
  batch.AddSequence(other, 0, other_blocks, LogitRows::kLast);
  std::vector<float> got(TinyConfig().vocab_size);
  ASSERT_TRUE(runner.Forward(batch, got).ok());
  ModelRunner fresh = MakeRunner(model);
  std::vector<float> expected(TinyConfig().vocab_size);
  ASSERT_TRUE(fresh.Forward(batch, expected).ok());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)), 0);
}

TEST(OffloadedAttentionTest, MalformedOffloadedSequencesAreRefused) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(60, TinyConfig().vocab_size, 27);
  std::vector<int32_t> blocks(kBlocksPerSeq);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<int32_t> host(kBlocksPerSeq);
  std::iota(host.begin(), host.end(), 0);
  const SparseSelection solo = Selection(SelectionMode::kSoloHead, 32);
  std::vector<float> none;
  std::vector<float> logits(TinyConfig().vocab_size);
  ModelRunner runner = MakeRunner(model, Offload(SelectionMode::kSoloHead, 8));
  StepBatch batch;
  batch.AddSequence(std::span<const int32_t>(tokens).first(59), 0, blocks, LogitRows::kNone, solo,
                    host);
  ASSERT_TRUE(runner.Forward(batch, none).ok());

  const auto step = [&](std::span<const int32_t> device, std::span<const int32_t> host_blocks,
                        const std::optional<SparseSelection>& sparse, int32_t count = 1) {
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(tokens).subspan(59 - count + 1, count),
                      59 - count + 1, device, LogitRows::kLast, sparse, host_blocks);
    return runner.Forward(batch, logits).code();
  };
  std::vector<int32_t> missing = blocks;
  missing[0] = -1;  // the sink block
  EXPECT_EQ(step(missing, host, solo), absl::StatusCode::kFailedPrecondition);
  missing = blocks;
  missing[14] = -1;  // the block the new token is written to
  EXPECT_EQ(step(missing, host, solo), absl::StatusCode::kInvalidArgument);
  missing = blocks;
  missing[5] = -1;  // fine for a decode row, not for a chunk that attends densely
  EXPECT_EQ(step(missing, host, solo, 2), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> bad_host = host;
  bad_host[3] = 2 * kBlocksPerSeq;
  EXPECT_EQ(step(blocks, bad_host, solo), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(step(blocks, std::span<const int32_t>(host).first(10), solo),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(step(blocks, host, std::nullopt), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(step(blocks, host, Selection(SelectionMode::kHeadWise, 32)),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> slot = blocks;
  slot[2] = kDenseBlocks;  // the first device slot is not the dense pool's
  EXPECT_EQ(step(slot, host, solo), absl::StatusCode::kInvalidArgument);
  // The refused steps left nothing behind.
  EXPECT_EQ(step(blocks, host, solo), absl::StatusCode::kOk);

  ModelRunner no_tier = MakeRunner(model);
  batch.Clear();
  batch.AddSequence(std::span<const int32_t>(tokens).first(8), 0, blocks, LogitRows::kNone, solo,
                    host);
  EXPECT_EQ(no_tier.Forward(batch, none).code(), absl::StatusCode::kInvalidArgument);
}

TEST(OffloadedAttentionTest, CreateRefusesCapacitiesThatCannotWork) {
  std::shared_ptr<const Model> model = TinyModel();
  const ModelConfig& config = model->config();
  const PagedKvLayout layout{.block_tokens = kBlockTokens,
                             .num_kv_heads = config.num_kv_heads,
                             .head_dim = config.head_dim};
  KvCache cache = *KvCache::Create(model->backend(), layout, config.num_layers, 16);
  Backend& backend = model->backend();
  const SparseLimits limits{.max_seqs = 2, .max_blocks_per_seq = 8, .num_heads = config.num_heads};
  OffloadConfig tiers;
  tiers.host_tokens = 4 * kBlockTokens;
  tiers.slot_tokens = 8 * kBlockTokens;
  EXPECT_TRUE(SparseAttention::Create(backend, cache, 8, tiers, limits).ok());
  // Slots past the cache's end.
  EXPECT_EQ(SparseAttention::Create(backend, cache, 10, tiers, limits).status().code(),
            absl::StatusCode::kInvalidArgument);
  OffloadConfig radius = tiers;
  radius.estimator.radius = 2.0f;
  EXPECT_EQ(SparseAttention::Create(backend, cache, 8, radius, limits).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A head's keys of a block of 1 token x 2 fp32 dims are 8 bytes: no head-wise fragments.
  const PagedKvLayout narrow{.block_tokens = 1, .num_kv_heads = 2, .head_dim = 2};
  KvCache small = *KvCache::Create(backend, narrow, 1, 4);
  OffloadConfig headwise{
      .selection = {.mode = SelectionMode::kHeadWise}, .host_tokens = 4, .slot_tokens = 2};
  EXPECT_EQ(SparseAttention::Create(backend, small, 2, headwise, limits).status().code(),
            absl::StatusCode::kInvalidArgument);
  headwise.selection.mode = SelectionMode::kSoloHead;
  EXPECT_TRUE(SparseAttention::Create(backend, small, 2, headwise, limits).ok());
  // The host tier is not pinned when it is made: the runner grows it as blocks are used.
  absl::StatusOr<std::unique_ptr<SparseAttention>> sparse =
      SparseAttention::Create(backend, cache, 8, tiers, limits);
  ASSERT_TRUE(sparse.ok());
  EXPECT_EQ((*sparse)->host_tier()->pinned_bytes(), 0);
}

// A step that fails after its tables were built (here: its tokens are asked for with the wrong
// sizes, and the next step abandons it) clears the directory; the steps after it still give the
// resident selection's logits.
TEST(OffloadedAttentionTest, AnAbandonedStepLeavesTheNextStepsRight) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 28);
  const SelectionMode mode = SelectionMode::kSoloHead;
  ModelRunner resident = MakeRunner(model);
  const auto want = Decode(resident, tokens, 10, Selection(mode, 32), 0, std::nullopt);

  ModelRunner runner = MakeRunner(model, Offload(mode, 8));
  std::vector<int32_t> blocks(kBlocksPerSeq);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<int32_t> host(kBlocksPerSeq);
  std::iota(host.begin(), host.end(), 0);
  // A first decode step, then one abandoned before its logits are read.
  StepBatch batch;
  std::vector<float> none;
  batch.AddSequence(std::span<const int32_t>(tokens).first(140), 0, blocks, LogitRows::kNone,
                    Selection(mode, 32), host);
  ASSERT_TRUE(runner.Forward(batch, none).ok());
  const BlockRange evicted = NonResidentBlocks(140, kBlockTokens, Selection(mode, 32).options);
  for (int32_t j = evicted.begin; j < evicted.end; ++j) blocks[static_cast<size_t>(j)] = -1;
  batch.Clear();
  batch.AddSequence(std::span<const int32_t>(tokens).subspan(140, 1), 140, blocks, LogitRows::kLast,
                    Selection(mode, 32), host);
  // Its logits asked for with the wrong size: it ran, and stays open.
  std::vector<float> wrong_size(3);
  EXPECT_EQ(runner.Forward(batch, wrong_size).code(), absl::StatusCode::kInvalidArgument);
  // The step is open until the next one begins: nothing may be forgotten meanwhile.
  EXPECT_EQ(runner.ForgetSparse(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(runner.FreeSlots(host).code(), absl::StatusCode::kFailedPrecondition);
  // Continued, the runner's steps (the abandoned one again first) give the resident logits.
  std::vector<std::vector<float>> continued;
  for (int32_t i = 140; i < 150; ++i) {
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(tokens).subspan(i, 1), i, blocks, LogitRows::kLast,
                      Selection(mode, 32), host);
    continued.emplace_back(TinyConfig().vocab_size);
    ASSERT_TRUE(runner.Forward(batch, continued.back()).ok());
  }
  ExpectBitwiseEqual(continued, want);
}

}  // namespace
}  // namespace pulse
