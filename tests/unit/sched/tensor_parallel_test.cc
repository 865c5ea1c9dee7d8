// A model split over 2 and 4 ranks, each a thread with its own CPU backend, shard of the weights,
// KV cache and offload tiers, gives the one-rank runner's logits and tokens bit for bit: dense,
// sparse over resident blocks and offloaded, SoloHead (one block set picked from every rank's
// heads) and a set a KV head, in one and two micro-batches; whole engines under memory pressure
// (admission, staged prompts, a cancellation) give the one-rank engine's tokens. A rank that fails
// mid-step fails the step on every rank without a hang, and the next step runs; in an engine, a
// copy fault on one rank is retried, or fails only the requests of the steps it hits.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/thread_communicator.h"
#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/model/parallel_runner.h"
#include "core/offload/selection.h"
#include "core/sched/engine.h"
#include "gtest/gtest.h"
#include "tests/unit/bitwise_logits.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::ExpectBitwiseEqual;
using ::pulse::testing::Prompt;

constexpr int32_t kBlockTokens = 4;
constexpr int32_t kBlocksPerSeq = 40;  // 160 tokens
constexpr int32_t kDenseBlocks = 2 * kBlocksPerSeq;
constexpr int32_t kPrompt = 118;
constexpr int32_t kDecode = 12;

// Four KV heads, two query heads each, and sizes every rank count divides.
ModelConfig SplitConfig(bool tied) {
  ModelConfig config = testing::TinyConfig();
  config.num_heads = 8;
  config.num_kv_heads = 4;
  config.intermediate_size = 48;
  config.vocab_size = 104;
  config.tie_word_embeddings = tied;
  return config;
}

struct Split {
  int32_t ranks = 1;
  bool tied = false;
  std::optional<OffloadConfig> offload = std::nullopt;
  int32_t faulty_rank = -1;  // whose copy plans fail from `fault_from` on
  int64_t fault_from = 0;
};

// One runner a rank over shard r of `split.ranks` of the seeded random model.
ParallelRunner MakeRunner(const Split& split) {
  const ModelConfig config = SplitConfig(split.tied);
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenRandomSource(config, /*seed=*/11);
  EXPECT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> communicators =
      CreateThreadCommunicators(split.ranks);
  EXPECT_TRUE(communicators.ok()) << communicators.status();
  const int32_t slots = split.offload && split.offload->host_tokens > 0
                            ? static_cast<int32_t>(split.offload->slot_tokens / kBlockTokens)
                            : 0;
  std::vector<ModelRunner> ranks;
  for (int32_t r = 0; r < split.ranks; ++r) {
    CpuBackendOptions backend_options;
    backend_options.threads = 1;
    if (r == split.faulty_rank) {
      backend_options.copy_fault = [from = split.fault_from](int64_t plan) { return plan >= from; };
    }
    absl::StatusOr<std::shared_ptr<Backend>> backend = CreateCpuBackend(backend_options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    absl::StatusOr<std::shared_ptr<const Model>> model =
        Model::Load(*backend, **source,
                    {.weight_type = DType::kF32, .shard = {.rank = r, .size = split.ranks}});
    EXPECT_TRUE(model.ok()) << model.status();
    KvCache cache = *KvCache::Create(**backend,
                                     {.block_tokens = kBlockTokens,
                                      .num_kv_heads = (*model)->dims().num_kv_heads,
                                      .head_dim = config.head_dim},
                                     config.num_layers, kDenseBlocks + slots);
    absl::StatusOr<ModelRunner> runner = ModelRunner::Create(
        *std::move(model), std::move(cache),
        {.max_step_tokens = kPrompt,
         .max_seqs = 2,
         .max_blocks_per_seq = kBlocksPerSeq,
         .offload = split.offload,
         .max_micro_batches = 2},
        split.ranks > 1 ? std::move((*communicators)[static_cast<size_t>(r)]) : nullptr);
    EXPECT_TRUE(runner.ok()) << runner.status();
    ranks.push_back(*std::move(runner));
  }
  absl::StatusOr<ParallelRunner> runner = ParallelRunner::Create(std::move(ranks));
  EXPECT_TRUE(runner.ok()) << runner.status();
  return *std::move(runner);
}

OffloadConfig Offloaded(SelectionMode mode, int32_t slots) {
  return {.selection = {.mode = mode},
          .host_tokens = int64_t{2} * kBlocksPerSeq * kBlockTokens,
          .slot_tokens = int64_t{slots} * kBlockTokens};
}

SparseSelection Selection(SelectionMode mode, uint64_t key, int32_t budget = 8 * kBlockTokens) {
  return {.options = {.mode = mode,
                      .budget_tokens = budget,
                      .sink_tokens = kBlockTokens,
                      .window_tokens = 2 * kBlockTokens},
          .key = key};
}

// What a run gives: each decode step's logits ([sequence][vocab]) and sampled tokens.
struct Outputs {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;
};

// Two sequences' prompts, one step each, then kDecode steps of both in `micro_batches`, which
// bring back their logits and, every other step, sampled tokens instead. With `mode`, the sequences
// select sparsely; offloaded (`host`), their blocks outside the sinks and window leave the device
// table as the engine frees them.
Outputs Decode(ParallelRunner& runner, std::optional<SelectionMode> mode, bool host,
               int32_t micro_batches, int32_t budget = 8 * kBlockTokens) {
  const int32_t vocab = SplitConfig(false).vocab_size;
  std::vector<std::vector<int32_t>> prompts = {Prompt(kPrompt + kDecode, vocab, 31),
                                               Prompt(kPrompt + kDecode, vocab, 32)};
  std::vector<std::vector<int32_t>> blocks(2, std::vector<int32_t>(kBlocksPerSeq));
  std::vector<std::vector<int32_t>> host_blocks(2);
  std::vector<std::optional<SparseSelection>> sparse(2);
  for (size_t s = 0; s < 2; ++s) {
    std::iota(blocks[s].begin(), blocks[s].end(), static_cast<int32_t>(s) * kBlocksPerSeq);
    if (host) {
      host_blocks[s].resize(kBlocksPerSeq);
      std::iota(host_blocks[s].begin(), host_blocks[s].end(),
                static_cast<int32_t>(s) * kBlocksPerSeq);
    }
    if (mode) sparse[s] = Selection(*mode, s + 1, budget);
  }
  StepBatch batch;
  std::vector<float> none;
  for (size_t s = 0; s < 2; ++s) {
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(prompts[s]).first(kPrompt), 0, blocks[s],
                      LogitRows::kNone, sparse[s], host_blocks[s]);
    const absl::Status prefilled = runner.Forward(batch, none);
    EXPECT_TRUE(prefilled.ok()) << prefilled;
  }
  Outputs run;
  std::vector<TokenSampling> sampling(2);
  for (TokenSampling& row : sampling) {
    row.temperature = 0.8f;
    row.top_k = 20;
  }
  for (int32_t i = kPrompt; i < kPrompt + kDecode; ++i) {
    batch.Clear();
    for (size_t s = 0; s < 2; ++s) {
      if (host) {
        const BlockRange evicted = NonResidentBlocks(i, kBlockTokens, sparse[s]->options);
        for (int32_t j = evicted.begin; j < evicted.end; ++j) {
          blocks[s][static_cast<size_t>(j)] = -1;
        }
      }
      batch.AddSequence(std::span<const int32_t>(prompts[s]).subspan(static_cast<size_t>(i), 1), i,
                        blocks[s], LogitRows::kLast, sparse[s], host_blocks[s]);
    }
    if (i % 2 == 0) {
      run.logits.emplace_back(2 * static_cast<size_t>(vocab));
      const absl::Status status = runner.Forward(batch, run.logits.back(), micro_batches);
      EXPECT_TRUE(status.ok()) << status;
    } else {
      for (size_t s = 0; s < 2; ++s) sampling[s].uniform = 0.1 + 0.4 * static_cast<double>(s);
      run.tokens.emplace_back(2);
      const absl::Status sampled =
          runner.ForwardAndSample(batch, sampling, {}, run.tokens.back(), micro_batches);
      EXPECT_TRUE(sampled.ok()) << sampled;
    }
  }
  return run;
}

void ExpectSameRun(const Outputs& run, const Outputs& expected) {
  ExpectBitwiseEqual(run.logits, expected.logits);
  EXPECT_EQ(run.tokens, expected.tokens);
}

TEST(TensorParallelTest, DenseDecodeIsTheOneRankDecodeBitwise) {
  for (const bool tied : {false, true}) {
    ParallelRunner one = MakeRunner({.tied = tied});
    const Outputs expected = Decode(one, std::nullopt, false, 1);
    for (const int32_t ranks : {2, 4}) {
      for (const int32_t micro_batches : {1, 2}) {
        SCOPED_TRACE(
            absl::StrCat(tied ? "tied " : "", ranks, " ranks, ", micro_batches, " micro-batches"));
        ParallelRunner split = MakeRunner({.ranks = ranks, .tied = tied});
        ExpectSameRun(Decode(split, std::nullopt, false, micro_batches), expected);
      }
    }
  }
}

TEST(TensorParallelTest, SparseDecodeOverResidentBlocksIsTheOneRankDecodeBitwise) {
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    ParallelRunner one = MakeRunner({.offload = OffloadConfig{}});
    const Outputs expected = Decode(one, mode, false, 1);
    for (const int32_t ranks : {2, 4}) {
      SCOPED_TRACE(absl::StrCat(static_cast<int>(mode), " ", ranks, " ranks"));
      ParallelRunner split = MakeRunner({.ranks = ranks, .offload = OffloadConfig{}});
      ExpectSameRun(Decode(split, mode, false, 1), expected);
    }
  }
}

// Few slots: blocks are recalled and evicted step after step, on every rank alike.
TEST(TensorParallelTest, OffloadedDecodeIsTheOneRankDecodeBitwise) {
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    const OffloadConfig offload = Offloaded(mode, 24);
    ParallelRunner one = MakeRunner({.offload = offload});
    const Outputs expected = Decode(one, mode, true, 1);
    const OffloadStats one_stats = one.offload_stats();
    EXPECT_GT(one_stats.cache.misses, 0);
    for (const int32_t ranks : {2, 4}) {
      for (const int32_t micro_batches : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(static_cast<int>(mode), " ", ranks, " ranks, ", micro_batches,
                                  " micro-batches"));
        ParallelRunner split = MakeRunner({.ranks = ranks, .offload = offload});
        ExpectSameRun(Decode(split, mode, true, micro_batches), expected);
        if (mode == SelectionMode::kSoloHead && micro_batches == 1) {
          // The same blocks, each rank moving its heads' share of them.
          const OffloadStats stats = split.offload_stats();
          EXPECT_EQ(stats.cache.misses, one_stats.cache.misses);
          EXPECT_EQ(stats.recall_bytes * ranks, one_stats.recall_bytes);
        }
      }
    }
  }
}

// OffloadConfig::rank_sets: each rank picks SoloHead's set from its own heads. A budget covering
// the context picks every block, as dense attention attends to them; a small one picks as many
// blocks on each rank as one rank picks, and its own.
TEST(TensorParallelTest, RankSetsPickOnEachRankAlone) {
  OffloadConfig offload = Offloaded(SelectionMode::kSoloHead, 24);
  offload.rank_sets = true;
  ParallelRunner dense = MakeRunner({});
  const Outputs expected = Decode(dense, std::nullopt, false, 1);
  // Slots for both sequences' every block.
  OffloadConfig every = Offloaded(SelectionMode::kSoloHead, 2 * kBlocksPerSeq);
  every.rank_sets = true;
  ParallelRunner covering = MakeRunner({.ranks = 2, .offload = every});
  ExpectSameRun(Decode(covering, SelectionMode::kSoloHead, true, 1, 1 << 20), expected);

  ParallelRunner one = MakeRunner({.offload = offload});
  const Outputs one_rank = Decode(one, SelectionMode::kSoloHead, true, 1);
  ParallelRunner split = MakeRunner({.ranks = 2, .offload = offload});
  const Outputs split_sets = Decode(split, SelectionMode::kSoloHead, true, 1);
  EXPECT_EQ(split.sparse_stats().picked_blocks, one.sparse_stats().picked_blocks);
  EXPECT_NE(split_sets.logits, one_rank.logits);
}

// The tiny model over `ranks` ranks, each shard on a CPU backend of one thread, as the engine
// takes it; the last rank's copy plans fail where `copy_fault` says.
ShardedModel Shards(int32_t ranks, const std::function<bool(int64_t)>& copy_fault = nullptr) {
  absl::StatusOr<std::unique_ptr<TensorSource>> source =
      OpenRandomSource(SplitConfig(false), /*seed=*/11);
  EXPECT_TRUE(source.ok()) << source.status();
  ShardedModel model{.connect = [ranks] { return CreateThreadCommunicators(ranks); }};
  for (int32_t r = 0; r < ranks; ++r) {
    CpuBackendOptions backend_options;
    backend_options.threads = 1;
    if (r == ranks - 1) backend_options.copy_fault = copy_fault;
    absl::StatusOr<std::shared_ptr<const Model>> shard =
        Model::Load(*CreateCpuBackend(backend_options), **source,
                    {.weight_type = DType::kF32, .shard = {.rank = r, .size = ranks}});
    EXPECT_TRUE(shard.ok()) << shard.status();
    model.shards.push_back(*std::move(shard));
  }
  return model;
}

// The tokens of the requests `ids` of `engine`, each finished without an error.
std::vector<std::vector<int32_t>> FinishedTokens(const Engine& engine,
                                                 std::span<const RequestId> ids) {
  std::vector<std::vector<int32_t>> tokens;
  for (const RequestId id : ids) {
    const RequestSnapshot snapshot = testing::SnapshotOf(engine, id);
    EXPECT_TRUE(snapshot.error.ok()) << snapshot.error;
    tokens.push_back(snapshot.tokens);
  }
  return tokens;
}

// Whole engines over 1, 2 and 4 ranks, under memory pressure: adaptive admission runs some
// requests resident and offloads others, a prompt longer than the KV cache is prefilled staged,
// the host tier grows on every rank as requests come, one request is cancelled in the middle.
// Every request's tokens, and the scheduler's decisions, are the one-rank engine's.
TEST(TensorParallelTest, AnEngineOverRanksGivesTheOneRankTokens) {
  const int32_t vocab = SplitConfig(false).vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {Prompt(90, vocab, 51), Prompt(20, vocab, 52),
                                                     Prompt(61, vocab, 53), Prompt(33, vocab, 54)};
  const EngineOptions options{
      .max_batch = 3,
      .prefill_chunk = 16,
      .max_step_tokens = 48,
      .block_tokens = kBlockTokens,
      .kv_capacity_tokens = 80,
      .offload = OffloadConfig{.selection = Selection(SelectionMode::kSoloHead, 0).options,
                               .host_tokens = int64_t{4} * 160,
                               .slot_tokens = int64_t{2} * 160,
                               .host_chunk_bytes = int64_t{16} << 10}};
  struct Run {
    std::vector<std::vector<int32_t>> tokens;
    EngineStats stats;
  };
  const auto run = [&](int32_t ranks) {
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(Shards(ranks), options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<RequestId> ids;
    ids.reserve(prompts.size());
    for (const std::vector<int32_t>& prompt : prompts) {
      ids.push_back(*(*engine)->Submit(prompt, testing::Greedy(24, true), nullptr));
    }
    for (int32_t step = 0; step < 12; ++step) EXPECT_TRUE((*engine)->Step().ok());
    EXPECT_TRUE((*engine)->Cancel(ids[1]).ok());
    testing::RunToIdle(**engine);
    return Run{.tokens = FinishedTokens(**engine, ids), .stats = (*engine)->stats()};
  };
  const Run one = run(1);
  EXPECT_GT(one.stats.admission.offloaded, 0);
  EXPECT_GT(one.stats.admission.staged, 0);
  for (const int32_t ranks : {2, 4}) {
    SCOPED_TRACE(ranks);
    const Run split = run(ranks);
    EXPECT_EQ(split.tokens, one.tokens);
    EXPECT_EQ(split.stats.admission.resident, one.stats.admission.resident);
    EXPECT_EQ(split.stats.admission.offloaded, one.stats.admission.offloaded);
    EXPECT_EQ(split.stats.admission.staged, one.stats.admission.staged);
    EXPECT_EQ(split.stats.offload.recall_bytes * ranks, one.stats.offload.recall_bytes);
  }
}

// An engine over 2 ranks whose second rank's copy engine fails: once, the step is run again and
// no token changes; persisting, the requests of the steps it hits fail with its status, nothing
// stays allocated, and repaired, the engine serves new requests the one-rank engine's tokens.
TEST(TensorParallelTest, ACopyFaultOnOneRankFailsOnlyItsStepsRequests) {
  const int32_t vocab = SplitConfig(false).vocab_size;
  const EngineOptions options{
      .max_batch = 4,
      .prefill_chunk = 16,
      .max_step_tokens = 64,
      .block_tokens = kBlockTokens,
      .kv_capacity_tokens = 96,
      .offload = OffloadConfig{.selection = Selection(SelectionMode::kSoloHead, 0).options,
                               .host_tokens = int64_t{4} * 160,
                               .slot_tokens = int64_t{4} * 160,
                               .fill_free_slots = false},
      .admission = AdmissionKind::kOffloadEvery};
  const auto generate = [&](Engine& engine, uint32_t seed) {
    std::vector<RequestId> ids;
    ids.reserve(3);
    for (uint32_t i = 0; i < 3; ++i) {
      ids.push_back(*engine.Submit(Prompt(40 + 3 * static_cast<int32_t>(i), vocab, seed + i),
                                   testing::Greedy(12, true), nullptr));
    }
    testing::RunToIdle(engine);
    return FinishedTokens(engine, ids);
  };
  const auto expected = generate(**Engine::Create(Shards(1), options), 61);

  std::atomic<int64_t> failed{0};
  std::unique_ptr<Engine> once = *Engine::Create(Shards(2,
                                                        [&failed](int64_t plan) {
                                                          if (plan != 9) return false;
                                                          ++failed;
                                                          return true;
                                                        }),
                                                 options);
  EXPECT_EQ(generate(*once, 61), expected);
  EXPECT_EQ(failed, 1);
  EXPECT_GE(once->stats().retried_steps, 1);

  std::atomic<bool> broken{false};
  std::unique_ptr<Engine> engine =
      *Engine::Create(Shards(2, [&broken](int64_t) { return broken.load(); }), options);
  std::vector<RequestId> ids;
  ids.reserve(3);
  for (uint32_t i = 0; i < 3; ++i) {
    ids.push_back(*engine->Submit(Prompt(40, vocab, 70 + i), testing::Greedy(12, true), nullptr));
  }
  for (int32_t step = 0; step < 8; ++step) ASSERT_TRUE(engine->Step().ok());
  broken = true;
  testing::RunToIdle(*engine);
  int32_t errors = 0;
  for (const RequestId id : ids) {
    const RequestSnapshot snapshot = testing::SnapshotOf(*engine, id);
    EXPECT_EQ(snapshot.state, RequestState::kFinished);
    if (snapshot.reason != FinishReason::kError) continue;
    ++errors;
    EXPECT_EQ(snapshot.error.code(), absl::StatusCode::kInternal) << snapshot.error;
  }
  EXPECT_GT(errors, 0);
  EXPECT_EQ(engine->stats().kv_blocks_in_use, 0);
  EXPECT_EQ(engine->stats().host_blocks_in_use, 0);
  broken = false;
  EXPECT_EQ(generate(*engine, 61), expected);
}

TEST(TensorParallelTest, AShardTheModelCannotTakeIsRefused) {
  absl::StatusOr<std::unique_ptr<TensorSource>> source =
      OpenRandomSource(SplitConfig(false), /*seed=*/11);
  ASSERT_TRUE(source.ok());
  CpuBackendOptions backend_options;
  backend_options.threads = 1;
  std::shared_ptr<Backend> backend = *CreateCpuBackend(backend_options);
  for (const TensorShard shard :
       {TensorShard{.rank = 0, .size = 3},  // 4 KV heads
        TensorShard{.rank = 2, .size = 2}, TensorShard{.rank = 0, .size = 0},
        TensorShard{.rank = 0, .size = 8}}) {  // 4 KV heads
    const absl::StatusOr<std::shared_ptr<const Model>> model =
        Model::Load(backend, **source, {.weight_type = DType::kF32, .shard = shard});
    EXPECT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
  }
  // A shard without its communicator, and runners out of rank order.
  const std::shared_ptr<const Model> half = *Model::Load(
      backend, **source, {.weight_type = DType::kF32, .shard = {.rank = 1, .size = 2}});
  KvCache cache = *KvCache::Create(*backend,
                                   {.block_tokens = kBlockTokens,
                                    .num_kv_heads = half->dims().num_kv_heads,
                                    .head_dim = half->config().head_dim},
                                   half->config().num_layers, kDenseBlocks);
  const ModelRunnerOptions options{.max_step_tokens = 8, .max_seqs = 1, .max_blocks_per_seq = 4};
  EXPECT_TRUE(
      absl::IsInvalidArgument(ModelRunner::Create(half, std::move(cache), options).status()));
  std::vector<std::unique_ptr<Communicator>> communicators = *CreateThreadCommunicators(2);
  KvCache second = *KvCache::Create(*backend,
                                    {.block_tokens = kBlockTokens,
                                     .num_kv_heads = half->dims().num_kv_heads,
                                     .head_dim = half->config().head_dim},
                                    half->config().num_layers, kDenseBlocks);
  absl::StatusOr<ModelRunner> rank1 =
      ModelRunner::Create(half, std::move(second), options, std::move(communicators[1]));
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  std::vector<ModelRunner> out_of_order;
  out_of_order.push_back(*std::move(rank1));
  EXPECT_TRUE(absl::IsInvalidArgument(ParallelRunner::Create(std::move(out_of_order)).status()));
}

// A malformed batch fails on every rank before any collective; a copy fault on one rank fails it
// in the middle of a step, its peers waiting in a collective: the step fails with the fault, and
// the runner runs the next steps.
TEST(TensorParallelTest, AFailingRankFailsTheStepWithoutAHang) {
  const int32_t vocab = SplitConfig(false).vocab_size;
  const std::vector<int32_t> tokens = Prompt(kPrompt, vocab, 41);
  ParallelRunner runner = MakeRunner({.ranks = 2,
                                      .offload = Offloaded(SelectionMode::kSoloHead, 24),
                                      .faulty_rank = 1,
                                      .fault_from = 0});
  std::vector<int32_t> blocks(kBlocksPerSeq);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<int32_t> host(kBlocksPerSeq);
  std::iota(host.begin(), host.end(), 0);
  StepBatch batch;
  std::vector<float> logits(static_cast<size_t>(vocab));
  const std::vector<int32_t> outside = {vocab};
  batch.AddSequence(outside, 0, blocks, LogitRows::kLast);
  EXPECT_TRUE(absl::IsInvalidArgument(runner.Forward(batch, logits)));
  // The prompt's full blocks are written back to rank 1's host tier, which fails: its attention
  // waits for them and leaves the step.
  const SparseSelection sparse = Selection(SelectionMode::kSoloHead, 1);
  for (int32_t attempt = 0; attempt < 2; ++attempt) {
    batch.Clear();
    batch.AddSequence(tokens, 0, blocks, LogitRows::kLast, sparse, host);
    const absl::Status failed = runner.Forward(batch, logits);
    EXPECT_TRUE(absl::IsInternal(failed)) << failed;
  }
  // Dense steps copy nothing: they run.
  batch.Clear();
  batch.AddSequence(std::span<const int32_t>(tokens).first(16), 0, blocks, LogitRows::kLast);
  const absl::Status dense = runner.Forward(batch, logits);
  EXPECT_TRUE(dense.ok()) << dense;
}

}  // namespace
}  // namespace pulse
