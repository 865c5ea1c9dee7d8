// Offloaded sparse decode through the ModelRunner on each backend (CUDA skipped without a
// device): with a budget covering the context, the logits are bitwise the dense ones, in both
// selection modes and with every copy executor (recall leaves the same bytes in the slots, and
// attention reads the same blocks in the same order); with a small budget they are bitwise those
// of the same selection with every block resident.
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/backend_model.h"
#include "tests/unit/bitwise_logits.h"

namespace pulse {
namespace {

using ::pulse::testing::ExpectBitwiseEqual;

constexpr int32_t kBlockTokens = 16;
constexpr int32_t kBlocksPerSeq = 24;  // 384 tokens
constexpr int32_t kDenseBlocks = kBlocksPerSeq;

class OffloadBackendTest : public ::pulse::testing::BackendModelTest {
 protected:
  void SetUp() override { LoadOnBackend(::pulse::testing::SmallConfig(512), 3); }

  // `offload` empty: dense attention; without tiers: sparse rows over resident blocks.
  absl::StatusOr<ModelRunner> CreateRunner(std::optional<OffloadConfig> offload,
                                           bool graphs = true) {
    const ModelConfig& config = model_->config();
    const auto slots =
        static_cast<int32_t>(offload && offload->host_tokens > 0 ? offload->slot_tokens : 0) /
        kBlockTokens;
    PULSE_ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(model_->backend(),
                                                          {.block_tokens = kBlockTokens,
                                                           .num_kv_heads = config.num_kv_heads,
                                                           .head_dim = config.head_dim,
                                                           .type = model_->backend().kv_type()},
                                                          config.num_layers, kDenseBlocks + slots));
    return ModelRunner::Create(model_, std::move(cache),
                               {.max_step_tokens = 384,
                                .max_seqs = 1,
                                .max_blocks_per_seq = kBlocksPerSeq,
                                .offload = offload,
                                .decode_graphs = graphs});
  }
  ModelRunner MakeRunner(std::optional<OffloadConfig> offload, bool graphs = true) {
    absl::StatusOr<ModelRunner> runner = CreateRunner(std::move(offload), graphs);
    EXPECT_TRUE(runner.ok()) << runner.status();
    return *std::move(runner);
  }

  // A 300-token prompt, then `decode` tokens of the same text one a step; the logits of those
  // steps. Offloaded (`offloaded`): before each step the blocks neither sinks, window nor written
  // to leave the device table, as the engine frees them. `before_step`, when given, sees each
  // decode step's position and batch before the step runs.
  std::vector<std::vector<float>> Decode(
      ModelRunner& runner, const std::optional<SparseSelection>& sparse, bool offloaded,
      int32_t decode = 40,
      const std::function<void(int32_t position, const StepBatch& batch)>& before_step = nullptr) {
    const int32_t vocab = model_->config().vocab_size;
    std::vector<int32_t> tokens(300 + decode);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(vocab));
    }
    std::vector<int32_t> blocks(kBlocksPerSeq);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::vector<int32_t> host;
    if (offloaded) {
      host.resize(kBlocksPerSeq);
      std::iota(host.begin(), host.end(), 0);
    }
    StepBatch batch;
    batch.AddSequence(std::span<const int32_t>(tokens).first(300), 0, blocks, LogitRows::kNone,
                      sparse, host);
    std::vector<float> none;
    const absl::Status prefilled = runner.Forward(batch, none);
    EXPECT_TRUE(prefilled.ok()) << prefilled;
    std::vector<std::vector<float>> logits;
    for (int32_t i = 300; i < 300 + decode; ++i) {
      if (offloaded) {
        const BlockRange evicted = NonResidentBlocks(i, kBlockTokens, sparse->options);
        for (int32_t j = evicted.begin; j < evicted.end; ++j) blocks[static_cast<size_t>(j)] = -1;
      }
      batch.Clear();
      batch.AddSequence(std::span<const int32_t>(tokens).subspan(i, 1), i, blocks, LogitRows::kLast,
                        sparse, host);
      if (before_step) before_step(i, batch);
      logits.emplace_back(vocab);
      const absl::Status status = runner.Forward(batch, logits.back());
      EXPECT_TRUE(status.ok()) << status;
    }
    return logits;
  }
};

// Both tiers: a host block for each of the sequence's blocks, `slots` device slots.
OffloadConfig Tiers(SelectionMode mode, int32_t slots,
                    CopyExecutor executor = CopyExecutor::kAuto) {
  return {.selection = {.mode = mode},
          .host_tokens = kBlocksPerSeq * kBlockTokens,
          .slot_tokens = slots * kBlockTokens,
          .executor = executor};
}

SparseSelection Selection(SelectionMode mode, int32_t budget) {
  return {.options = {.mode = mode,
                      .budget_tokens = budget,
                      .sink_tokens = kBlockTokens,
                      .window_tokens = 2 * kBlockTokens},
          .key = 1};
}

TEST_P(OffloadBackendTest, ACoveringBudgetGivesTheDenseLogitsWithEveryExecutor) {
  ModelRunner dense_runner = MakeRunner(std::nullopt);
  const auto dense = Decode(dense_runner, std::nullopt, false);
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    for (const CopyExecutor executor : {CopyExecutor::kAuto, CopyExecutor::kGather,
                                        CopyExecutor::kBatchDma, CopyExecutor::kPerChunk}) {
      SCOPED_TRACE(std::string(CopyExecutorName(executor)) +
                   (mode == SelectionMode::kSoloHead ? " solohead" : " headwise"));
      ModelRunner runner = MakeRunner(Tiers(mode, kBlocksPerSeq, executor));
      ExpectBitwiseEqual(Decode(runner, Selection(mode, 1 << 20), true), dense);
      const OffloadStats stats = runner.offload_stats();
      EXPECT_GT(stats.recall_bytes, 0);
      EXPECT_GT(stats.cache.hits, stats.cache.misses);
      // 340 tokens of KV: 21 full blocks, each written back once a layer.
      EXPECT_EQ(stats.writeback_blocks, 21 * model_->config().num_layers);
      // The device drove every decode step: the host waited only for the logits (and the
      // counters), except where the baseline executors plan the recall on the host.
      const bool planned_on_host =
          executor == CopyExecutor::kBatchDma || executor == CopyExecutor::kPerChunk;
      EXPECT_EQ(runner.step_host_waits(), planned_on_host ? model_->config().num_layers : 0);
    }
  }
}

TEST_P(OffloadBackendTest, ASmallBudgetGivesTheResidentSelectionsLogits) {
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(mode == SelectionMode::kSoloHead ? "solohead" : "headwise");
    ModelRunner resident_runner = MakeRunner(OffloadConfig{});
    const auto resident = Decode(resident_runner, Selection(mode, 128), false);
    ModelRunner runner = MakeRunner(Tiers(mode, 6));
    ExpectBitwiseEqual(Decode(runner, Selection(mode, 128), true), resident);
    EXPECT_GT(runner.offload_stats().cache.evictions, 0);
  }
}

// An fp8 host tier (OffloadConfig::host_codec): each recalled block is read as its encoding (a
// quarter of an f32 block on the CPU backend, half a bf16 one on CUDA), and the logits stay those
// of the device's form to fp8's precision.
TEST_P(OffloadBackendTest, AnFp8HostTierRecallsItsEncodingsAndKeepsTheLogits) {
  const SelectionMode mode = SelectionMode::kSoloHead;
  OffloadConfig fp8 = Tiers(mode, 8);
  fp8.host_codec = HostCodec::kFp8E4m3;
  ModelRunner raw_runner = MakeRunner(Tiers(mode, 8));
  const auto want = Decode(raw_runner, Selection(mode, 128), true);
  ModelRunner runner = MakeRunner(fp8);
  const auto got = Decode(runner, Selection(mode, 128), true);
  const OffloadStats stats = runner.offload_stats();
  const PagedKvLayout layout = runner.cache().layout();
  EXPECT_GT(stats.cache.misses, 0);
  EXPECT_EQ(runner.sparse_stats().recall_bytes,
            stats.cache.misses * HostBlockBytes(layout, HostCodec::kFp8E4m3));
  // Each step's logits keep a cosine of at least 0.99 with the raw tier's (0.9976 at the least
  // here, where unrelated steps' logits have -0.2 to 0.2), and differ from them: the recalled
  // blocks were the encodings'.
  ASSERT_EQ(got.size(), want.size());
  bool differ = false;
  for (size_t step = 0; step < want.size(); ++step) {
    double dot = 0, aa = 0, bb = 0;
    for (size_t v = 0; v < want[step].size(); ++v) {
      dot += static_cast<double>(want[step][v]) * got[step][v];
      aa += static_cast<double>(want[step][v]) * want[step][v];
      bb += static_cast<double>(got[step][v]) * got[step][v];
    }
    EXPECT_GE(dot / std::sqrt(aa * bb), 0.99) << "step " << step;
    differ = differ || got[step] != want[step];
  }
  EXPECT_TRUE(differ);

  // The host-planned executors decode the same blocks into the same slots: the same logits.
  for (const CopyExecutor executor : {CopyExecutor::kBatchDma, CopyExecutor::kPerChunk}) {
    SCOPED_TRACE(CopyExecutorName(executor));
    OffloadConfig planned = fp8;
    planned.executor = executor;
    ModelRunner planned_runner = MakeRunner(planned);
    ExpectBitwiseEqual(Decode(planned_runner, Selection(mode, 128), true), got);
  }
  // Head-wise fragments are not theirs to decode: refused when the runner is made.
  OffloadConfig headwise = Tiers(SelectionMode::kHeadWise, 8, CopyExecutor::kPerChunk);
  headwise.host_codec = HostCodec::kFp8E4m3;
  EXPECT_EQ(CreateRunner(headwise).status().code(), absl::StatusCode::kUnimplemented);
}

// Offloaded decode steps replayed as graphs (the recall and write-back branches on the copy
// stream inside them) compute what the same steps compute op by op, bit for bit, and count the
// same recall.
TEST_P(OffloadBackendTest, GraphsOfOffloadedStepsGiveTheOpByOpLogits) {
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(mode == SelectionMode::kSoloHead ? "solohead" : "headwise");
    ModelRunner op_by_op = MakeRunner(Tiers(mode, 8), /*graphs=*/false);
    const auto want = Decode(op_by_op, Selection(mode, 128), true);
    ModelRunner graphed = MakeRunner(Tiers(mode, 8), /*graphs=*/true);
    ExpectBitwiseEqual(Decode(graphed, Selection(mode, 128), true), want);
    EXPECT_EQ(graphed.offload_stats().recall_bytes, op_by_op.offload_stats().recall_bytes);
    EXPECT_EQ(graphed.offload_stats().cache, op_by_op.offload_stats().cache);
    EXPECT_EQ(graphed.graph_stats().failed, 0);
    if (model_->backend().SupportsGraphs()) {
      EXPECT_GT(graphed.graph_stats().launched, 0);
      EXPECT_GT(graphed.offload_stats().recall_seconds, 0.0);  // timed inside the graphs too
    }
    EXPECT_EQ(graphed.step_host_waits(), 0);
  }
}

// Four sequences of 300-token prompts, prefilled one a step, then 24 decode steps of them all
// run as `micro_batches` micro-batches: each decode step's logits, [sequences][vocab], and the
// runner's graph counts. The sequences `offloaded` names attend through `mode`'s selection with
// a budget of 128 tokens over both tiers; the others densely, every block on the device.
struct FourSequences {
  std::vector<std::vector<float>> logits;
  GraphStats graphs;
};

FourSequences DecodeFour(const std::shared_ptr<const Model>& model, SelectionMode mode,
                         int32_t micro_batches, bool graphs, std::array<bool, 4> offloaded) {
  constexpr int32_t kSeqs = 4;
  constexpr int32_t kPrompt = 300;
  constexpr int32_t kDecode = 24;
  constexpr int32_t kSlotsPerSeq = 8;
  const ModelConfig& config = model->config();
  const int32_t vocab = config.vocab_size;
  const OffloadConfig offload{.selection = {.mode = mode},
                              .host_tokens = kSeqs * kBlocksPerSeq * kBlockTokens,
                              .slot_tokens = kSeqs * kSlotsPerSeq * kBlockTokens};
  absl::StatusOr<KvCache> cache =
      KvCache::Create(model->backend(),
                      {.block_tokens = kBlockTokens,
                       .num_kv_heads = config.num_kv_heads,
                       .head_dim = config.head_dim,
                       .type = model->backend().kv_type()},
                      config.num_layers, kSeqs * (kBlocksPerSeq + kSlotsPerSeq));
  EXPECT_TRUE(cache.ok()) << cache.status();
  absl::StatusOr<ModelRunner> runner = ModelRunner::Create(model, *std::move(cache),
                                                           {.max_step_tokens = kPrompt,
                                                            .max_seqs = kSeqs,
                                                            .max_blocks_per_seq = kBlocksPerSeq,
                                                            .offload = offload,
                                                            .decode_graphs = graphs,
                                                            .max_micro_batches = kSeqs});
  EXPECT_TRUE(runner.ok()) << runner.status();
  std::vector<std::vector<int32_t>> tokens(kSeqs, std::vector<int32_t>(kPrompt + kDecode));
  std::vector<std::vector<int32_t>> blocks(kSeqs, std::vector<int32_t>(kBlocksPerSeq));
  std::vector<std::vector<int32_t>> host(kSeqs);
  std::vector<std::optional<SparseSelection>> selections(kSeqs);
  for (int32_t s = 0; s < kSeqs; ++s) {
    for (size_t i = 0; i < tokens[s].size(); ++i) {
      tokens[s][i] = static_cast<int32_t>((i * 7919 + 13 + 101 * s) % static_cast<size_t>(vocab));
    }
    std::iota(blocks[s].begin(), blocks[s].end(), s * kBlocksPerSeq);
    if (!offloaded[static_cast<size_t>(s)]) continue;
    host[s].resize(kBlocksPerSeq);
    std::iota(host[s].begin(), host[s].end(), s * kBlocksPerSeq);
    selections[s] = Selection(mode, 128);
    selections[s]->key = static_cast<uint64_t>(s) + 1;
  }
  StepBatch batch;
  std::vector<float> none;
  for (int32_t s = 0; s < kSeqs; ++s) {  // one prompt a step: max_step_tokens is one prompt
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(tokens[s]).first(kPrompt), 0, blocks[s],
                      LogitRows::kNone, selections[s], host[s]);
    const absl::Status prefilled = runner->Forward(batch, none);
    EXPECT_TRUE(prefilled.ok()) << prefilled;
  }
  FourSequences out;
  for (int32_t i = kPrompt; i < kPrompt + kDecode; ++i) {
    batch.Clear();
    for (int32_t s = 0; s < kSeqs; ++s) {
      if (selections[s]) {
        const BlockRange evicted = NonResidentBlocks(i, kBlockTokens, selections[s]->options);
        for (int32_t j = evicted.begin; j < evicted.end; ++j) blocks[s][j] = -1;
      }
      batch.AddSequence(std::span<const int32_t>(tokens[s]).subspan(i, 1), i, blocks[s],
                        LogitRows::kLast, selections[s], host[s]);
    }
    out.logits.emplace_back(static_cast<size_t>(kSeqs) * vocab);
    const absl::Status status = runner->Forward(batch, out.logits.back(), micro_batches);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(runner->step_micro_batches(), micro_batches);
  }
  EXPECT_GT(runner->offload_stats().cache.evictions, 0);
  out.graphs = runner->graph_stats();
  return out;
}

// A decode step of four offloaded sequences run as 2 or 4 micro-batches (the layer-wise
// schedule: one micro-batch's recall landing while another computes) gives each sequence the
// logits of the step run whole: bit for bit on the CPU, whose kernels compute a row alike
// whatever the batch; on CUDA, whose GEMMs and attention splits depend on the batch, the same
// rows to rounding (each row's cosine with the whole step's at least 0.999, where rows sent to
// the wrong sequence or stale slots would be unrelated).
TEST_P(OffloadBackendTest, MicroBatchesGiveTheLogitsOfTheWholeStep) {
  const int32_t vocab = model_->config().vocab_size;
  const std::array<bool, 4> all = {true, true, true, true};
  for (const SelectionMode mode : {SelectionMode::kSoloHead, SelectionMode::kHeadWise}) {
    SCOPED_TRACE(mode == SelectionMode::kSoloHead ? "solohead" : "headwise");
    const auto whole = DecodeFour(model_, mode, 1, /*graphs=*/true, all).logits;
    for (const int32_t micro_batches : {2, 4}) {
      SCOPED_TRACE(micro_batches);
      const FourSequences split = DecodeFour(model_, mode, micro_batches, /*graphs=*/true, all);
      // Split steps replay as graphs too (their shapes keyed by the micro-batches').
      EXPECT_EQ(split.graphs.failed, 0);
      if (model_->backend().SupportsGraphs()) {
        EXPECT_GT(split.graphs.launched, 0);
      }
      if (GetParam() == "cpu") {
        ExpectBitwiseEqual(split.logits, whole);
        continue;
      }
      ASSERT_EQ(split.logits.size(), whole.size());
      for (size_t step = 0; step < whole.size(); ++step) {
        for (size_t s = 0; s < all.size(); ++s) {
          const std::span<const float> a =
              std::span<const float>(whole[step]).subspan(s * vocab, vocab);
          const std::span<const float> b =
              std::span<const float>(split.logits[step]).subspan(s * vocab, vocab);
          double dot = 0, aa = 0, bb = 0;
          for (int32_t v = 0; v < vocab; ++v) {
            dot += static_cast<double>(a[v]) * b[v];
            aa += static_cast<double>(a[v]) * a[v];
            bb += static_cast<double>(b[v]) * b[v];
          }
          EXPECT_GE(dot / std::sqrt(aa * bb), 0.999) << "step " << step << " sequence " << s;
        }
      }
    }
  }
}

// Decode steps that mix resident rows with offloaded ones (as adaptive placement leaves them
// under pressure) replay as graphs keyed by which rows are which, and compute what the same
// steps compute op by op, bit for bit: whole and split into micro-batches, with the rows of each
// kind in one run or interleaved.
TEST_P(OffloadBackendTest, GraphsOfMixedStepsGiveTheOpByOpLogits) {
  for (const std::array<bool, 4> offloaded : {std::array<bool, 4>{false, false, true, true},
                                              std::array<bool, 4>{true, false, true, false}}) {
    for (const int32_t micro_batches : {1, 2}) {
      SCOPED_TRACE(::testing::Message()
                   << "offloaded " << offloaded[0] << offloaded[1] << offloaded[2] << offloaded[3]
                   << ", " << micro_batches << " micro-batches");
      const SelectionMode mode = SelectionMode::kSoloHead;
      const FourSequences op_by_op =
          DecodeFour(model_, mode, micro_batches, /*graphs=*/false, offloaded);
      const FourSequences graphed =
          DecodeFour(model_, mode, micro_batches, /*graphs=*/true, offloaded);
      ExpectBitwiseEqual(graphed.logits, op_by_op.logits);
      EXPECT_EQ(graphed.graphs.failed, 0);
      if (model_->backend().SupportsGraphs()) {
        // A shape runs op by op, is captured on its second step, then replays; the plan's padded
        // sizes change a few times in 24 steps.
        EXPECT_GE(graphed.graphs.launched, 12);
      }
    }
  }
}

// A copy that fails (the backend's copy fault hook fails the first copy of two chosen steps)
// fails its step with a status; the same step run again (as the engine retries it) gives the
// logits of a run without the fault, bit for bit, and so do the steps after it. Op by op: on
// CUDA the hook sees the copies enqueued outside graphs.
class OffloadFaultTest : public OffloadBackendTest {
 protected:
  void SetUp() override {
    LoadOnBackend(::pulse::testing::SmallConfig(512), 3,
                  [this](int64_t) { return fail_next_.exchange(false); });
  }
  std::atomic<bool> fail_next_{false};
};

TEST_P(OffloadFaultTest, AStepWhoseCopyFailedGivesItsLogitsWhenRunAgain) {
  const SelectionMode mode = SelectionMode::kSoloHead;
  ModelRunner clean = MakeRunner(Tiers(mode, 6), /*graphs=*/false);
  const auto want = Decode(clean, Selection(mode, 128), true);

  ModelRunner runner = MakeRunner(Tiers(mode, 6), /*graphs=*/false);
  int32_t failures = 0;
  // Steps 310 and 325 first run with their first copy failing; Decode then runs them again.
  const auto got =
      Decode(runner, Selection(mode, 128), true, 40, [&](int32_t position, const StepBatch& batch) {
        if (position != 310 && position != 325) return;
        fail_next_ = true;
        std::vector<float> logits(model_->config().vocab_size);
        const absl::Status failed = runner.Forward(batch, logits);
        EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
        EXPECT_FALSE(fail_next_);  // the step did copy, and its first copy failed
        ++failures;
      });
  ExpectBitwiseEqual(got, want);
  EXPECT_EQ(failures, 2);
}

INSTANTIATE_TEST_SUITE_P(Backends, OffloadFaultTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Backends, OffloadBackendTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pulse
