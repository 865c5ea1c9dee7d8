// pulse-offload-accuracy: what sparse decode attention costs in accuracy, on a real model and a
// real text (issue 6): perplexity, agreement of the greedy token with dense attention, and
// step-to-step block reuse, for head-wise and SoloHead selection at several budgets.
//
//   pulse-offload-accuracy --model MODEL.gguf --text FILE [--windows 2048,4096,8192]
//       [--per-window 4] [--eval 128] [--budgets 256,512,1024,2048] [--sink S] [--window W]
//       [--block B] [--estimator E] [--dense-layers 0] [--sequential 0] [--backend cpu]
//       [--crosscheck-picks 0] [--host-codec raw] [--ranks 1] [--rank-sets 0] [--out FILE.jsonl]
//
// Sink, window, block size and estimator default to the library's (tests/tools/offload_defaults.h);
// records made with all four (and no dense layers) carry "default": true. --dense-layers N: the
// first N layers attend densely in every sparse configuration (OffloadConfig::dense_layers), the
// others within its budget; the records' attended_fraction counts both.
//
// The text is tokenized with the model's tokenizer and cut into windows of each size, spread
// evenly over it. In a window, the first tokens (a multiple of 32 tokens and of the block size,
// `eval` + 1 short of the window, so that block sizes dividing 32 score the same tokens) are
// prefilled densely once; then the last `eval` tokens are fed one a step, teacher
// forced, to every configuration in turn - dense, head-wise at each budget, and SoloHead with
// each head aggregate at each budget - as sequences sharing the prefilled blocks (so they all see
// the same context), each with blocks of its own for the tokens it appends. By default a step
// feeds one position to every configuration of one selection mode at once (the rows of one step
// select in one mode): fast, but the step that last picked a block is kept per block
// (core/offload/block_summaries.h), so configurations picking from the shared blocks in one step
// count each other's picks as reused, and reuse is recorded as null. With --sequential 1 a
// configuration's steps run back to back, one sequence a step, and reuse is measured: the share
// of picked blocks that the same (layer, set) picked the step before (none for a window's first
// step, which has no step before). Each step scores the next token of the text: ppl = exp(mean of
// -log p); agreement = the share of steps whose argmax equals dense attention's. Blocks are
// summarized by --estimator (core/backend/block_estimator.h: box-r1 ranks them by Quest's upper
// bound of q.k, box-r0 by the q.k of the key box's center, boxesN and tokens by the best of smaller
// boxes, -bf16 and -int8 round the summaries). Records are JSON Lines, "bench": "accuracy"; a table
// is printed.
//
// --host-codec fp8 reads the shared context as an fp8 host tier would give it back
// (tests/tools/fp8_round_trip.h): once prefilled and summarized (summaries are taken from
// exact blocks, as the engine does), every shared block but those holding the sinks goes through
// the codec and back. An offloaded request keeps exact only its sinks, its window and the block
// it writes (and blocks it gave up while they stay in free slots), so this is at worst what
// recall from the fp8 tier gives every configuration (dense included: its perplexity is then
// dense attention over the fp8 context, which the records' "host_codec" says).
//
// --ranks N splits the model over N tensor-parallel ranks, each a CPU backend of its own
// (docs/design/tensor-parallel.md); with --rank-sets 0 SoloHead picks one set from every rank's
// heads (the one-rank picks and results, bit for bit), with --rank-sets 1 each rank picks its own
// set from its own heads, and the reuse and attended fraction are rank 0's. CPU only, without
// --crosscheck-picks or --host-codec fp8.
//
// --crosscheck-picks 1 runs the backend under PickCrossCheckBackend
// (tests/tools/pick_crosscheck.h): every layer's selection is run again on the CPU backend over
// host copies of the backend's inputs (its queries and stored summaries), and each configuration's
// record gets how many of its picks the CPU backend picked too ("picks_compared", "picks_same",
// "picks_same_fraction") and the rest by the relative gap between their score and the CPU's
// lowest-ranked pick's ("picks_differing_gap": near ties or not), and a line is printed for it.
// It needs --sequential 1: a step is then one configuration's, so its picks are that
// configuration's. Shadowing waits for the backend in every layer, so decode steps run op by op
// (no CUDA graphs) and slowly; the other figures are unchanged. With --backend cpu every pick must
// be the same.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/thread_communicator.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/format/gguf_reader.h"
#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "core/model/parallel_runner.h"
#include "core/model/tensor_source.h"
#include "core/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/tools/fp8_round_trip.h"
#include "tests/tools/offload_defaults.h"
#include "tests/tools/pick_crosscheck.h"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

constexpr std::string_view kUsage =
    "usage: pulse-offload-accuracy --model MODEL.gguf --text FILE [--windows 2048,4096,8192] "
    "[--per-window 4] [--eval 128] [--budgets 256,512,1024,2048] [--sink S] [--window W] "
    "[--block B] [--estimator E] [--dense-layers 0] [--sequential 0] [--backend cpu|cuda] "
    "[--crosscheck-picks 0|1 (needs --sequential 1)] [--host-codec raw|fp8] [--ranks N] "
    "[--rank-sets 0|1] [--out FILE.jsonl]";

struct Args {
  std::string model;
  std::string text;
  std::vector<int32_t> windows = {2048, 4096, 8192};
  int32_t per_window = 4;
  int32_t eval = 128;
  std::vector<int32_t> budgets = {256, 512, 1024, 2048};
  int32_t sink = SelectionDefaults{}.sink;
  int32_t window = SelectionDefaults{}.window;
  int32_t block = SelectionDefaults{}.block;
  std::string estimator = SelectionDefaults{}.estimator;
  int32_t dense_layers = 0;
  bool sequential = false;
  bool cuda = false;  // else the CPU backend
  bool crosscheck_picks = false;
  bool fp8 = false;  // --host-codec fp8
  int32_t ranks = 1;
  bool rank_sets = false;
  std::string out;
  std::string command;  // the command line, for the records
};

absl::StatusOr<std::vector<int32_t>> ParseList(absl::string_view text) {
  std::vector<int32_t> values;
  for (const absl::string_view item : absl::StrSplit(text, ',')) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad list item '", item, "'"));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  args.command = absl::StrJoin(std::span<char*>(argv, static_cast<size_t>(argc)), " ");
  for (int i = 1; i < argc; i += 2) {
    const absl::string_view flag = argv[i];
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    const absl::string_view value = argv[i + 1];
    bool ok = true;
    if (flag == "--model") {
      args.model = std::string(value);
    } else if (flag == "--text") {
      args.text = std::string(value);
    } else if (flag == "--windows") {
      PULSE_ASSIGN_OR_RETURN(args.windows, ParseList(value));
    } else if (flag == "--budgets") {
      PULSE_ASSIGN_OR_RETURN(args.budgets, ParseList(value));
    } else if (flag == "--per-window") {
      ok = absl::SimpleAtoi(value, &args.per_window) && args.per_window > 0;
    } else if (flag == "--eval") {
      ok = absl::SimpleAtoi(value, &args.eval) && args.eval > 0;
    } else if (flag == "--sink") {
      ok = absl::SimpleAtoi(value, &args.sink) && args.sink >= 0;
    } else if (flag == "--window") {
      ok = absl::SimpleAtoi(value, &args.window) && args.window >= 0;
    } else if (flag == "--block") {
      ok = absl::SimpleAtoi(value, &args.block) && args.block > 0;
    } else if (flag == "--estimator") {
      args.estimator = std::string(value);
    } else if (flag == "--dense-layers") {
      ok = absl::SimpleAtoi(value, &args.dense_layers) && args.dense_layers >= 0;
    } else if (flag == "--sequential") {
      ok = value == "0" || value == "1";
      args.sequential = value == "1";
    } else if (flag == "--backend") {
      ok = value == "cpu" || value == "cuda";
      args.cuda = value == "cuda";
    } else if (flag == "--crosscheck-picks") {
      ok = value == "0" || value == "1";
      args.crosscheck_picks = value == "1";
    } else if (flag == "--host-codec") {
      ok = value == "raw" || value == "fp8";
      args.fp8 = value == "fp8";
    } else if (flag == "--ranks") {
      ok = absl::SimpleAtoi(value, &args.ranks) && args.ranks >= 1;
    } else if (flag == "--rank-sets") {
      ok = value == "0" || value == "1";
      args.rank_sets = value == "1";
    } else if (flag == "--out") {
      args.out = std::string(value);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad value for ", flag));
  }
  if (args.model.empty() || args.text.empty()) {
    return absl::InvalidArgumentError("--model and --text are required");
  }
  if (args.crosscheck_picks && !args.sequential) {
    return absl::InvalidArgumentError(
        "--crosscheck-picks 1 needs --sequential 1 (a step's picks are one configuration's)");
  }
  if (args.ranks > 1 && (args.cuda || args.crosscheck_picks || args.fp8)) {
    return absl::InvalidArgumentError(
        "--ranks above 1 runs on the CPU backend, without --crosscheck-picks or --host-codec fp8");
  }
  PULSE_RETURN_IF_ERROR(ParseEstimator(args.estimator).status());
  return args;
}

// One way of attending, fed the same tokens as the others.
struct Config {
  std::string mode;  // "dense", "headwise", "solohead"
  std::string aggregate = {};
  int32_t budget = 0;
  std::optional<SparseSelection> sparse = std::nullopt;
  // Over every window of one size:
  double nll = 0;
  int64_t predictions = 0;
  int64_t agreeing = 0;
  int64_t picked_blocks = 0;
  int64_t reused_blocks = 0;            // of picked_blocks, those the step before picked
  PickCrossCheckStats crosscheck = {};  // with --crosscheck-picks
};

std::vector<Config> Configs(const Args& args) {
  std::vector<Config> configs = {{.mode = "dense"}};
  uint64_t key = 1;
  for (const int32_t budget : args.budgets) {
    for (const auto& [mode, aggregate] :
         {std::pair{SelectionMode::kHeadWise, HeadAggregate::kSoftmaxSum},
          std::pair{SelectionMode::kSoloHead, HeadAggregate::kSoftmaxSum},
          std::pair{SelectionMode::kSoloHead, HeadAggregate::kMax}}) {
      Config config;
      config.mode = mode == SelectionMode::kHeadWise ? "headwise" : "solohead";
      config.aggregate = aggregate == HeadAggregate::kMax ? "max" : "softmax-sum";
      config.budget = budget;
      config.sparse = SparseSelection{.options = {.mode = mode,
                                                  .aggregate = aggregate,
                                                  .budget_tokens = budget,
                                                  .sink_tokens = args.sink,
                                                  .window_tokens = args.window},
                                      .key = key++};
      configs.push_back(config);
    }
  }
  return configs;
}

double NegativeLogLikelihood(std::span<const float> logits, int32_t token) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float logit : logits) sum += std::exp(double{logit} - max);
  return std::log(sum) + max - logits[token];
}

int32_t Argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The prefilled tokens of a window are a multiple of this.
int32_t PrefillUnit(int32_t block_tokens) { return std::lcm(block_tokens, 32); }

// Evaluates one window (tokens[0, size)) for every config, adding to their totals; returns the
// runner's per-config statistics through `runner`. `crosscheck`, when not null, is the runner's
// backend (then `sequential` holds), and each step's cross-check goes to the step's one config.
absl::Status EvaluateWindow(ParallelRunner& runner, std::span<const int32_t> window, int32_t eval,
                            bool sequential, PickCrossCheckBackend* crosscheck, int32_t fp8_from,
                            std::vector<Config>& configs) {
  const int32_t size = static_cast<int32_t>(window.size());
  const int32_t block_tokens = runner.leader().cache().layout().block_tokens;
  const int32_t unit = PrefillUnit(block_tokens);
  if (unit <= 0) return absl::InvalidArgumentError("blocks of no tokens");
  const int32_t context = (size - eval - 1) / unit * unit;
  const int32_t shared_blocks = context / block_tokens;
  const int32_t own_blocks = (size - context) / block_tokens + 1;
  std::vector<std::vector<int32_t>> tables;
  for (size_t c = 0; c < configs.size(); ++c) {
    std::vector<int32_t> table(shared_blocks);
    std::iota(table.begin(), table.end(), 0);
    for (int32_t b = 0; b < own_blocks; ++b) {
      table.push_back(shared_blocks + static_cast<int32_t>(c) * own_blocks + b);
    }
    tables.push_back(std::move(table));
  }
  StepBatch batch;
  // The prefill summarises the shared blocks for the sparse configs (any selection will do).
  batch.AddSequence(window.first(context), 0, tables[0], LogitRows::kNone, configs[1].sparse);
  std::vector<float> none;
  PULSE_RETURN_IF_ERROR(runner.Forward(batch, none));
  if (fp8_from >= 0) {
    PULSE_RETURN_IF_ERROR(RoundTripFp8(runner.leader(), fp8_from, shared_blocks));
  }

  const size_t vocab = static_cast<size_t>(runner.leader().model().config().vocab_size);
  // The configurations in steps: sequentially one a step (each picks alone, so its reuse is its
  // own), or batched by selection mode (a step's sparse rows select in one mode: dense with the
  // SoloHead ones, then the HeadWise ones), much faster but with the reuse of configurations
  // that pick from the shared blocks in one step mixed, so it is not reported.
  std::vector<std::vector<size_t>> groups;
  if (sequential) {
    for (size_t c = 0; c < configs.size(); ++c) groups.push_back({c});
  } else {
    groups.resize(2);
    for (size_t c = 0; c < configs.size(); ++c) {
      const bool headwise =
          configs[c].sparse && configs[c].sparse->options.mode == SelectionMode::kHeadWise;
      groups[headwise ? 1 : 0].push_back(c);
    }
    if (groups[1].empty()) groups.pop_back();
  }
  // Dense attention's greedy token at each evaluated position (configs[0] is dense, in the
  // first group).
  std::vector<int32_t> dense(static_cast<size_t>(eval));
  std::vector<float> logits;
  const auto run = [&](const std::vector<size_t>& group, int32_t position) -> absl::Status {
    std::vector<SparseAttentionStats> before(group.size());
    batch.Clear();
    for (size_t g = 0; g < group.size(); ++g) {
      const Config& config = configs[group[g]];
      if (config.sparse) before[g] = runner.sparse_stats(config.sparse->key);
      batch.AddSequence(window.subspan(position, 1), position, tables[group[g]], LogitRows::kLast,
                        config.sparse);
    }
    logits.resize(group.size() * vocab);
    PULSE_RETURN_IF_ERROR(runner.Forward(batch, logits));
    if (crosscheck != nullptr) configs[group[0]].crosscheck.Add(crosscheck->TakeStats());
    const int32_t next = window[position + 1];
    const auto step = static_cast<size_t>(position - context);
    for (size_t g = 0; g < group.size(); ++g) {
      Config& config = configs[group[g]];
      const std::span<const float> row = std::span<const float>(logits).subspan(g * vocab, vocab);
      const int32_t argmax = Argmax(row);
      if (group[g] == 0) dense[step] = argmax;
      config.nll += NegativeLogLikelihood(row, next);
      config.predictions += 1;
      config.agreeing += argmax == dense[step] ? 1 : 0;
      if (!config.sparse) continue;
      const SparseAttentionStats after = runner.sparse_stats(config.sparse->key);
      config.picked_blocks += after.picked_blocks - before[g].picked_blocks;
      // The step before a window's first step was another config's, or another window's.
      if (sequential && position > context) {
        config.reused_blocks += after.reused_blocks - before[g].reused_blocks;
      }
    }
    return absl::OkStatus();
  };
  if (sequential) {
    for (const std::vector<size_t>& group : groups) {
      for (int32_t position = context; position < context + eval; ++position) {
        PULSE_RETURN_IF_ERROR(run(group, position));
      }
    }
  } else {
    for (int32_t position = context; position < context + eval; ++position) {
      for (const std::vector<size_t>& group : groups) PULSE_RETURN_IF_ERROR(run(group, position));
    }
  }
  return absl::OkStatus();
}

absl::Status Run(const Args& args) {
  PULSE_ASSIGN_OR_RETURN(const GgufFile gguf, GgufFile::Open(args.model));
  PULSE_ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(gguf));
  std::ifstream file(args.text, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read ", args.text));
  std::stringstream text;
  text << file.rdbuf();
  const std::vector<int32_t> tokens = tokenizer->Encode(text.str(), {});
  PULSE_ASSIGN_OR_RETURN(const std::unique_ptr<TensorSource> source, OpenTensorSource(args.model));
  std::shared_ptr<PickCrossCheckBackend> crosscheck;
  std::vector<std::shared_ptr<const Model>> shards;
  for (int32_t r = 0; r < args.ranks; ++r) {
    CpuBackendOptions cpu;
    cpu.threads =
        args.ranks > 1
            ? std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()) / args.ranks)
            : 0;
    PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> backend,
                           args.cuda ? CreateCudaBackend({}) : CreateCpuBackend(cpu));
    if (args.crosscheck_picks) {
      PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> reference, CreateCpuBackend({}));
      crosscheck =
          std::make_shared<PickCrossCheckBackend>(std::move(backend), std::move(reference));
      backend = crosscheck;
    }
    PULSE_ASSIGN_OR_RETURN(
        std::shared_ptr<const Model> shard,
        Model::Load(std::move(backend), *source,
                    {.weight_type = DType::kBF16, .shard = {.rank = r, .size = args.ranks}}));
    shards.push_back(std::move(shard));
  }
  const std::shared_ptr<const Model>& model = shards.front();
  const ModelConfig& config = model->config();
  FILE* out = args.out.empty() ? nullptr : std::fopen(args.out.c_str(), "w");
  std::printf("%-9s %-11s %7s %7s %9s %9s %10s %7s %8s\n", "mode", "aggregate", "window", "budget",
              "ppl", "ppl dense", "agreement", "reuse", "attended");
  for (const int32_t size : args.windows) {
    if (size > config.max_position || static_cast<int64_t>(tokens.size()) < int64_t{size}) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a window of %d tokens: the model's context is %d, the text has %d tokens", size,
          config.max_position, tokens.size()));
    }
    std::vector<Config> configs = Configs(args);
    const int32_t block_tokens = args.block;
    const int32_t own_blocks = (args.eval + 1 + PrefillUnit(block_tokens)) / block_tokens + 1;
    const int32_t num_blocks =
        size / block_tokens + static_cast<int32_t>(configs.size()) * (own_blocks + 1);
    // Rank 0's KV heads: what a rank summarizes and scores.
    const PagedKvLayout layout{.block_tokens = block_tokens,
                               .num_kv_heads = model->dims().num_kv_heads,
                               .head_dim = config.head_dim,
                               .type = model->backend().kv_type()};
    // Sparse attention over resident blocks only (no host tier): each sequence's own selection.
    PULSE_ASSIGN_OR_RETURN(const BlockEstimator estimator, ParseEstimator(args.estimator));
    OffloadConfig offload;
    offload.estimator = estimator;
    offload.dense_layers = args.dense_layers;
    offload.rank_sets = args.rank_sets;
    std::vector<std::unique_ptr<Communicator>> communicators(shards.size());
    if (args.ranks > 1) {
      PULSE_ASSIGN_OR_RETURN(communicators, CreateThreadCommunicators(args.ranks));
    }
    std::vector<ModelRunner> ranks;
    for (size_t r = 0; r < shards.size(); ++r) {
      PULSE_ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(shards[r]->backend(), layout,
                                                            config.num_layers, num_blocks));
      PULSE_ASSIGN_OR_RETURN(
          ModelRunner rank,
          ModelRunner::Create(shards[r], std::move(cache),
                              {.max_step_tokens = size,
                               .max_seqs = static_cast<int32_t>(configs.size()),
                               .max_blocks_per_seq = size / block_tokens + 2,
                               .max_logit_rows = static_cast<int32_t>(configs.size()),
                               .offload = offload},
                              std::move(communicators[r])));
      ranks.push_back(std::move(rank));
    }
    PULSE_ASSIGN_OR_RETURN(ParallelRunner runner, ParallelRunner::Create(std::move(ranks)));
    const int64_t stride = (static_cast<int64_t>(tokens.size()) - size) / args.per_window;
    for (int32_t w = 0; w < args.per_window; ++w) {
      PULSE_RETURN_IF_ERROR(
          EvaluateWindow(runner, std::span<const int32_t>(tokens).subspan(w * stride, size),
                         args.eval, args.sequential, crosscheck.get(),
                         args.fp8 ? (args.sink + block_tokens - 1) / block_tokens : -1, configs));
    }
    for (const Config& c : configs) PULSE_RETURN_IF_ERROR(c.crosscheck.error);
    const double dense_ppl = std::exp(configs[0].nll / configs[0].predictions);
    for (const Config& c : configs) {
      const double ppl = std::exp(c.nll / c.predictions);
      const double agreement = static_cast<double>(c.agreeing) / c.predictions;
      const SparseAttentionStats stats =
          c.sparse ? runner.sparse_stats(c.sparse->key) : SparseAttentionStats{};
      // Measured only when the configurations step one at a time (null otherwise).
      nlohmann::json reuse;
      if (args.sequential && c.sparse) {
        reuse = c.picked_blocks > 0 ? static_cast<double>(c.reused_blocks) / c.picked_blocks : 1.0;
      }
      const double attended =
          stats.context_tokens > 0
              ? static_cast<double>(stats.attended_tokens) / stats.context_tokens
              : 1.0;
      std::printf(
          "%-9s %-11s %7d %7s %9.4f %9.4f %10.4f %7s %8.3f\n", c.mode.c_str(), c.aggregate.c_str(),
          size, c.budget == 0 ? "-" : std::to_string(c.budget).c_str(), ppl, dense_ppl, agreement,
          reuse.is_null() ? "-" : absl::StrFormat("%.3f", reuse.get<double>()).c_str(), attended);
      // The cross-check's figures, for a sparse configuration under --crosscheck-picks.
      nlohmann::json picks_compared;
      nlohmann::json picks_same;
      nlohmann::json picks_same_fraction;
      nlohmann::json picks_differing_gap;
      if (crosscheck != nullptr && c.sparse) {
        const PickCrossCheckStats& picks = c.crosscheck;
        picks_compared = picks.picks;
        picks_same = picks.same;
        if (picks.picks > 0) {
          picks_same_fraction = static_cast<double>(picks.same) / static_cast<double>(picks.picks);
        }
        picks_differing_gap = nlohmann::json::object();
        std::string gaps;
        for (size_t b = 0; b < kPickGapBucketNames.size(); ++b) {
          const std::string name(kPickGapBucketNames[b]);
          picks_differing_gap[name] = picks.differing[b];
          absl::StrAppend(&gaps, b == 0 ? "" : ", ", name, " ", picks.differing[b]);
        }
        std::printf(
            "  picks the CPU's: %lld of %lld (%s); differing by relative gap: %s\n",
            static_cast<long long>(picks.same), static_cast<long long>(picks.picks),
            picks_same_fraction.is_null()
                ? "-"
                : absl::StrFormat("%.4f%%", 100 * picks_same_fraction.get<double>()).c_str(),
            gaps.c_str());
      }
      if (out != nullptr) {
        nlohmann::json record = {
            {"bench", "accuracy"},
            {"model", args.model.substr(args.model.find_last_of('/') + 1)},
            {"mode", c.mode},
            {"aggregate", c.aggregate.empty() ? nlohmann::json() : nlohmann::json(c.aggregate)},
            {"budget", c.budget == 0 ? nlohmann::json() : nlohmann::json(c.budget)},
            {"window_tokens", size},
            {"windows", args.per_window},
            {"eval_tokens", args.eval},
            {"sink_tokens", args.sink},
            {"recent_window_tokens", args.window},
            {"block_tokens", args.block},
            {"estimator", args.estimator},
            {"dense_layers", args.dense_layers},
            {"host_codec", args.fp8 ? "fp8" : "raw"},
            {"summary_bytes_per_token",
             static_cast<double>(SummaryBytes(layout, estimator)) / args.block},
            {"score_macs_per_token",
             static_cast<double>(ScoreMultiplyAdds(layout, estimator, config.num_heads)) /
                 args.block},
            {"ppl", ppl},
            {"ppl_dense", dense_ppl},
            {"agreement", agreement},
            {"reuse", reuse},
            {"attended_fraction", attended},
            {"default",
             args.dense_layers == 0 && !args.fp8 &&
                 SelectionDefaults{}.Match(args.block, args.sink, args.window, estimator)},
            {"backend", args.cuda ? "cuda" : "cpu"},
            {"ranks", args.ranks},
            {"rank_sets", args.rank_sets},
            {"command", args.command}};
        if (crosscheck != nullptr) {
          record["picks_compared"] = picks_compared;
          record["picks_same"] = picks_same;
          record["picks_same_fraction"] = picks_same_fraction;
          record["picks_differing_gap"] = picks_differing_gap;
        }
        std::fprintf(out, "%s\n", record.dump().c_str());
        std::fflush(out);
      }
    }
    std::fflush(stdout);
  }
  if (out != nullptr) std::fclose(out);
  return absl::OkStatus();
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-offload-accuracy", pulse::kUsage, pulse::ParseArgs(argc, argv),
                        &pulse::Run);
}
