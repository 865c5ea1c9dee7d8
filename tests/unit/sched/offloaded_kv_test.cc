// Offloaded sparse decode through the ModelRunner on the CPU backend (its copy engine is a
// thread, so recall and write-back really run beside compute): every full block is written back
// to the host tier once, blocks that are not resident are recalled into device slots, and the
// result is bitwise what the same selection gives with every block resident. Capacity faults and
// malformed batches give statuses and leave the runner usable.
#include "core/model/offloaded_kv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "core/backend/cpu/cpu_backend.h"
#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
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

ModelRunner MakeRunner(std::shared_ptr<const Model> model,
                       std::optional<OffloadOptions> offload = std::nullopt) {
  const ModelConfig& config = model->config();
  const int32_t slots = offload ? offload->slot_blocks : 0;
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

OffloadOptions Offload(SelectionMode mode, int32_t slots,
                       EvictionKind eviction = EvictionKind::kLru) {
  return {
      .host_blocks = 2 * kBlocksPerSeq, .slot_blocks = slots, .mode = mode, .eviction = eviction};
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

// One sequence (see DecodeAll).
std::vector<std::vector<float>> Decode(ModelRunner& runner, const std::vector<int32_t>& tokens,
                                       int32_t decode, const SparseSelection& sparse,
                                       int32_t first_block, std::optional<int32_t> first_host) {
  return DecodeAll(runner, {{tokens, sparse, first_block, first_host}}, decode);
}

TEST(OffloadedKvTest, ABudgetCoveringTheContextIsDenseAttentionBitwise) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> tokens = Prompt(150, TinyConfig().vocab_size, 21);
  ModelRunner dense_runner = MakeRunner(model);
  const auto dense = Decode(dense_runner, tokens, 20, Selection(SelectionMode::kSoloHead, 1 << 20),
                            0, std::nullopt);
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(static_cast<int>(mode));
    ModelRunner runner = MakeRunner(model, Offload(mode, kBlocksPerSeq));
    ExpectBitwiseEqual(Decode(runner, tokens, 20, Selection(mode, 1 << 20), 0, 5), dense);
    const OffloadStats stats = runner.offload_stats();
    const int64_t layers = TinyConfig().num_layers;
    // 130 prompt tokens fill 32 blocks, the 20 decoded tokens fill 5 more (the last token's KV
    // is at position 149: blocks through 37 are full).
    EXPECT_EQ(stats.writeback_blocks, layers * 37);
    EXPECT_GT(stats.recall_bytes, 0);
    EXPECT_GT(stats.cache.hits, 0);
    EXPECT_EQ(stats.cache.misses * (mode == SelectionMode::kSoloHead ? 1 : 2), stats.recall_chunks);
    EXPECT_EQ(stats.cache.evictions, 0);
    EXPECT_GT(stats.recall_seconds, 0.0);
  }
}

TEST(OffloadedKvTest, ASmallBudgetGivesTheResidentSelectionBitwiseAndEvicts) {
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
      const CacheStats own = runner.offload_stats(1);
      EXPECT_EQ(own.hits, stats.cache.hits);
      EXPECT_EQ(own.misses, stats.cache.misses);
      // Counted per layer too: the layers add up to the request's counts, and each layer of
      // this model looked its picks up.
      CacheStats layers;
      for (int32_t layer = 0; layer < TinyConfig().num_layers; ++layer) {
        const CacheStats one = runner.offload_stats(1, layer);
        EXPECT_GT(one.hits + one.misses, 0) << "layer " << layer;
        layers.hits += one.hits;
        layers.misses += one.misses;
        layers.evictions += one.evictions;
      }
      EXPECT_EQ(layers.hits, own.hits);
      EXPECT_EQ(layers.misses, own.misses);
      EXPECT_EQ(layers.evictions, own.evictions);
      EXPECT_EQ(runner.offload_stats(1, TinyConfig().num_layers).hits, 0);
      EXPECT_EQ(runner.sparse_stats(1).picked_blocks, runner.sparse_stats().picked_blocks);
    }
  }
}

// A step's misses enqueued row by row as the rows are selected (early_recall_bytes of 1: a plan
// a row with misses) give the logits, bytes and chunks of one plan a layer (early recall off).
TEST(OffloadedKvTest, RecallingEachRowsMissesEarlyChangesOnlyThePlans) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<std::vector<int32_t>> tokens = {Prompt(150, TinyConfig().vocab_size, 23),
                                                    Prompt(150, TinyConfig().vocab_size, 24)};
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(static_cast<int>(mode));
    std::vector<std::vector<std::vector<float>>> logits;
    std::vector<OffloadStats> stats;
    for (const size_t early : {std::numeric_limits<size_t>::max(), size_t{1}}) {
      OffloadOptions options = Offload(mode, 12);
      options.early_recall_bytes = early;
      ModelRunner runner = MakeRunner(model, options);
      logits.push_back(
          DecodeAll(runner,
                    {{tokens[0], Selection(mode, 32, 1), 0, 0},
                     {tokens[1], Selection(mode, 32, 2), kBlocksPerSeq, kBlocksPerSeq}},
                    20));
      stats.push_back(runner.offload_stats());
    }
    ExpectBitwiseEqual(logits[1], logits[0]);
    EXPECT_GT(stats[0].cache.evictions, 0);
    EXPECT_EQ(stats[0].early_recalls, 0);
    EXPECT_GT(stats[1].early_recalls, 0);
    EXPECT_EQ(stats[1].recall_plans, stats[0].recall_plans);
    EXPECT_EQ(stats[1].recall_bytes, stats[0].recall_bytes);
    EXPECT_EQ(stats[1].recall_chunks, stats[0].recall_chunks);
    EXPECT_EQ(stats[1].cache, stats[0].cache);
  }
}

TEST(OffloadedKvTest, AForgottenSequencesHostBlocksServeTheNextOneWithoutStaleSlots) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> first = Prompt(150, TinyConfig().vocab_size, 23);
  const std::vector<int32_t> second = Prompt(150, TinyConfig().vocab_size, 24);
  const SelectionMode mode = SelectionMode::kSoloHead;
  ModelRunner fresh = MakeRunner(model, Offload(mode, 10));
  const auto expected = Decode(fresh, second, 20, Selection(mode, 48, 2), 0, 0);

  ModelRunner runner = MakeRunner(model, Offload(mode, 10));
  Decode(runner, first, 20, Selection(mode, 48, 1), 0, 0);
  ASSERT_TRUE(runner.ForgetSparse(1).ok());
  ExpectBitwiseEqual(Decode(runner, second, 20, Selection(mode, 48, 2), 0, 0), expected);
}

TEST(OffloadedKvTest, ADeviceTierTooSmallForTheStepIsResourceExhaustedAndHarmless) {
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

TEST(OffloadedKvTest, MalformedOffloadedSequencesAreRefused) {
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

TEST(OffloadedKvTest, CreateRefusesCapacitiesThatCannotWork) {
  std::shared_ptr<const Model> model = TinyModel();
  const ModelConfig& config = model->config();
  const PagedKvLayout layout{.block_tokens = kBlockTokens,
                             .num_kv_heads = config.num_kv_heads,
                             .head_dim = config.head_dim};
  KvCache cache = *KvCache::Create(model->backend(), layout, config.num_layers, 16);
  Backend& backend = model->backend();
  EXPECT_EQ(
      OffloadedKv::Create(backend, cache, 8, {.host_blocks = 0, .slot_blocks = 8}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      OffloadedKv::Create(backend, cache, 10, {.host_blocks = 4, .slot_blocks = 8}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(OffloadedKv::Create(backend, cache, 8, {.host_blocks = 4, .slot_blocks = 8}).ok());
  // A head's keys of a block of 1 token x 2 fp32 dims are 8 bytes: no head-wise fragments.
  const PagedKvLayout narrow{.block_tokens = 1, .num_kv_heads = 2, .head_dim = 2};
  KvCache small = *KvCache::Create(backend, narrow, 1, 4);
  EXPECT_EQ(
      OffloadedKv::Create(backend, small, 2,
                          {.host_blocks = 4, .slot_blocks = 2, .mode = SelectionMode::kHeadWise})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(OffloadedKv::Create(backend, small, 2, {.host_blocks = 4, .slot_blocks = 2}).ok());
}

// OffloadedKv alone, on the CPU backend, whose device memory is host memory the test can read.
class OffloadedKvBlocksTest : public ::testing::Test {
 protected:
  static constexpr PagedKvLayout kLayout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 8};
  static constexpr int32_t kCacheBlocks = 8;  // [0, 4) dense, [4, 8) slots
  static constexpr int32_t kFirstSlot = 4;

  void SetUp() override {
    backend_ = *CreateCpuBackend({.threads = 1});
    cache_.emplace(*KvCache::Create(*backend_, kLayout, 1, kCacheBlocks));
  }

  std::unique_ptr<OffloadedKv> Make(SelectionMode mode) {
    absl::StatusOr<std::unique_ptr<OffloadedKv>> offloaded = OffloadedKv::Create(
        *backend_, *cache_, kFirstSlot, {.host_blocks = 6, .slot_blocks = 4, .mode = mode});
    EXPECT_TRUE(offloaded.ok()) << offloaded.status();
    return *std::move(offloaded);
  }
  std::span<float> Block(int32_t block) {
    return {static_cast<float*>(cache_->layer(0)) + block * kLayout.block_elems(),
            static_cast<size_t>(kLayout.block_elems())};
  }
  std::span<const float> HostBlock(const OffloadedKv& offloaded, int32_t block) {
    return {static_cast<const float*>(offloaded.host_layer(0)) + block * kLayout.block_elems(),
            static_cast<size_t>(kLayout.block_elems())};
  }
  // Host block h holds the values 1000 h + i: written through dense block h % 4.
  void FillHost(OffloadedKv& offloaded) {
    for (int32_t h = 0; h < 6; ++h) {
      std::span<float> block = Block(h % 4);
      for (size_t i = 0; i < block.size(); ++i) block[i] = 1000.0f * h + static_cast<float>(i);
      const BlockWriteBack write{.device_block = h % 4, .host_block = h};
      ASSERT_TRUE(offloaded.WriteBack(0, {&write, 1}).ok());
      ASSERT_TRUE(offloaded.EndStep().ok());
    }
  }

  std::shared_ptr<Backend> backend_;
  std::optional<KvCache> cache_;
};

TEST_F(OffloadedKvBlocksTest, WriteBackAndRecallMoveWholeBlocks) {
  std::unique_ptr<OffloadedKv> offloaded = Make(SelectionMode::kSoloHead);
  FillHost(*offloaded);
  for (int32_t h = 0; h < 6; ++h) {
    for (size_t i = 0; i < static_cast<size_t>(kLayout.block_elems()); i += 37) {
      ASSERT_EQ(HostBlock(*offloaded, h)[i], 1000.0f * h + static_cast<float>(i));
    }
  }
  const absl::StatusOr<int32_t> slot = offloaded->Resolve(0, 0, 5, 1, 1.0f);
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_GE(*slot, kFirstSlot);
  ASSERT_TRUE(offloaded->Recall(0).ok());
  ASSERT_TRUE(offloaded->EndStep().ok());
  EXPECT_TRUE(std::ranges::equal(Block(*slot), HostBlock(*offloaded, 5)));
  EXPECT_EQ(offloaded->stats().writeback_blocks, 6);
  EXPECT_EQ(offloaded->stats().recall_chunks, 1);
  EXPECT_EQ(offloaded->stats().recall_bytes, kLayout.block_bytes());
  // Resident now: a hit, nothing moves.
  EXPECT_EQ(offloaded->Resolve(0, 0, 5, 1, 1.0f).value_or(-1), *slot);
  ASSERT_TRUE(offloaded->Recall(0).ok());
  EXPECT_EQ(offloaded->stats().recall_chunks, 1);
  EXPECT_EQ(offloaded->stats(1).hits, 1);
  EXPECT_EQ(offloaded->stats(1).misses, 1);
}

TEST_F(OffloadedKvBlocksTest, HeadWiseRecallMovesOneHeadsKeysAndValues) {
  std::unique_ptr<OffloadedKv> offloaded = Make(SelectionMode::kHeadWise);
  FillHost(*offloaded);
  for (int32_t slot = kFirstSlot; slot < kCacheBlocks; ++slot) {
    std::ranges::fill(Block(slot), -1.0f);
  }
  const absl::StatusOr<int32_t> slot = offloaded->Resolve(0, 1, 2, 1, 0.0f);
  ASSERT_TRUE(slot.ok()) << slot.status();
  ASSERT_TRUE(offloaded->Recall(0).ok());
  ASSERT_TRUE(offloaded->EndStep().ok());
  const std::span<const float> host = HostBlock(*offloaded, 2);
  const std::span<const float> got = Block(*slot);
  const int64_t head = kLayout.head_elems();
  for (int64_t i = 0; i < kLayout.block_elems(); ++i) {
    const bool head_one = (i / head) % 2 == 1;  // [K h0][K h1][V h0][V h1]
    ASSERT_EQ(got[i], head_one ? host[i] : -1.0f) << i;
  }
  EXPECT_EQ(offloaded->stats().recall_chunks, 2);
  EXPECT_EQ(offloaded->stats().recall_bytes, kLayout.block_bytes() / 2);
  EXPECT_EQ(offloaded->Resolve(0, 2, 2, 1, 0.0f).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(offloaded->Resolve(0, 0, 6, 1, 0.0f).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(OffloadedKvBlocksTest, AnAbandonedStepLeavesNoSlotClaimingABlockItNeverReceived) {
  std::unique_ptr<OffloadedKv> offloaded = Make(SelectionMode::kSoloHead);
  FillHost(*offloaded);
  ASSERT_TRUE(offloaded->Resolve(0, 0, 3, 1, 0.0f).ok());
  ASSERT_TRUE(offloaded->EndStep().ok());  // without Recall: the step failed after Resolve
  const absl::StatusOr<int32_t> slot = offloaded->Resolve(0, 0, 3, 1, 0.0f);
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(offloaded->stats(1).misses, 2);
  ASSERT_TRUE(offloaded->Recall(0).ok());
  ASSERT_TRUE(offloaded->EndStep().ok());
  EXPECT_TRUE(std::ranges::equal(Block(*slot), HostBlock(*offloaded, 3)));
}

TEST_F(OffloadedKvBlocksTest, AStepsSelectionBeyondTheSlotsIsResourceExhausted) {
  std::unique_ptr<OffloadedKv> offloaded = Make(SelectionMode::kSoloHead);
  FillHost(*offloaded);
  for (int32_t h = 0; h < 4; ++h) ASSERT_TRUE(offloaded->Resolve(0, 0, h, 1, 0.0f).ok());
  EXPECT_EQ(offloaded->Resolve(0, 0, 4, 1, 0.0f).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(offloaded->Recall(0).ok());
  ASSERT_TRUE(offloaded->EndStep().ok());
  // The next step may evict them.
  const absl::StatusOr<int32_t> slot = offloaded->Resolve(0, 0, 4, 1, 0.0f);
  ASSERT_TRUE(slot.ok()) << slot.status();
  ASSERT_TRUE(offloaded->Recall(0).ok());
  ASSERT_TRUE(offloaded->EndStep().ok());
  EXPECT_TRUE(std::ranges::equal(Block(*slot), HostBlock(*offloaded, 4)));
  EXPECT_EQ(offloaded->stats().cache.evictions, 1);
}

}  // namespace
}  // namespace pulse
