// pulse-retrieval: whether sparse decode attention keeps a model able to retrieve one fact from
// far back in its context, beside dense attention, on the CPU backend (or --backend cuda).
//
//   pulse-retrieval --model MODEL.gguf --text FILE [--contexts 2048,4096,8192]
//       [--depths 0,25,50,75,100] [--trials 20] [--answer-tokens 24] [--modes solohead,headwise]
//       [--fractions 8,16] [--sink S] [--window W] [--block B] [--estimator E]
//       [--agreement on] [--prompts 20] [--agree-tokens 128] [--agree-min 1024]
//       [--agree-max 4096] [--seed 0] [--backend cpu] [--threads 0] [--weights f32 on the CPU,
//       bf16 on CUDA]
//       [--verbose off] [--host-codec raw] [--out FILE.jsonl]
//
// Sink, window, block size and estimator default to the library's (tests/tools/offload_defaults.h);
// records made with all four carry "default": true.
//
// --host-codec fp8 reads the shared prompt as an fp8 host tier gives it back
// (tests/tools/fp8_round_trip.h): once prefilled and summarized (summaries from exact blocks, as
// the engine takes them), every shared block but those holding the sinks and the window of the
// prompt's end, which an offloaded request keeps resident, goes through the codec and back.
// Every configuration then reads it so, dense too; the records say "host_codec".
//
// Passkey retrieval. For each context C, depth D (percent) and trial t: a random 5-digit passkey
// (seeded from C, D and t) is stated by a needle sentence placed at depth D, on a line of its
// own, of a filler of consecutive lines of the text (from an offset seeded from C and t, so the
// depths of a trial share their filler), as many lines as make the chat prompt at most C tokens
// (C less the answer when C would pass the model's context). A question on its own line ends the
// user message; the model's chat template renders it with the generation prompt. The prompt is
// prefilled densely once into shared KV blocks; then each configuration - dense, and each mode at
// each budget fraction F (budget = C / F tokens, rounded down to whole blocks) - continues from
// those blocks, with blocks of its own for what it appends (fraction 1: a budget of the model's
// whole context, which selects every block and must match dense), and greedy-decodes up to
// --answer-tokens tokens. Every answer token comes from the configuration's own attention: the
// shared prefill stops before the prompt's last token (at a block boundary), each configuration
// feeds the rest of the prompt (a dense chunk, then the last token as its first decode step). The
// answer is the first run of exactly 5 digits in the decoded text; it is correct when it equals
// the passkey. Decoding stops at an end-of-generation token or once such a run is complete (a
// non-digit follows it). SmolLM2-135M-Instruct tends to repeat the needle sentence before the
// number ("The secret code for the archive door is 48213."), 15 tokens, hence 24 by default.
// Configurations run one after another, one sequence a step: the sparse rows of a
// step select in one mode, and pick statistics are kept per block.
//
// Free-running agreement (--agreement on): --prompts chat prompts, their lengths spread evenly
// over [--agree-min, --agree-max] tokens, each text from a seeded offset and a request to continue
// it, greedy-decoded for --agree-tokens tokens densely and with each sparse configuration (budget
// = the prompt's length / F, rounded down to whole blocks), each feeding back its own tokens. A
// generation that ends (an end-of-generation token) is padded with an end marker, so two that end
// alike agree. leading_agreement: the common prefix with dense's tokens over --agree-tokens,
// averaged over prompts; token_agreement: the share of positions whose tokens are dense's;
// position_agreement: that share at each position.
//
// Records are JSON Lines ("bench": "retrieval" per context, depth and configuration; "bench":
// "agreement" per configuration); tables go to stdout, progress to stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/chat/chat_template.h"
#include "core/format/gguf_reader.h"
#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "core/model/tensor_source.h"
#include "core/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/tools/fp8_round_trip.h"
#include "tests/tools/offload_defaults.h"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

constexpr std::string_view kUsage =
    "usage: pulse-retrieval --model MODEL.gguf --text FILE [--contexts 2048,4096,8192] "
    "[--depths 0,25,50,75,100] [--trials 20] [--answer-tokens 24] [--modes solohead,headwise] "
    "[--fractions 8,16] [--sink S] [--window W] [--block B] [--estimator E] "
    "[--agreement on|off] [--prompts 20] [--agree-tokens 128] [--agree-min 1024] "
    "[--agree-max 4096] [--seed 0] [--backend cpu|cuda] [--threads 0] [--weights f32|bf16] "
    "[--verbose on|off] [--out FILE.jsonl]";

constexpr std::string_view kQuestion =
    "What is the secret code for the archive door? Answer with the number only.";
constexpr std::string_view kRequest = "Continue this scene in the same style.";

// The needle sentence, stating the passkey.
std::string Needle(int32_t passkey) {
  return absl::StrFormat("The secret code for the archive door is %d. Remember it.", passkey);
}
// Tokens of a prefill step (a chunk of the shared prompt).
constexpr int32_t kPrefillChunk = 2048;
// Shortest context a prompt may have: the template, needle and question take about 80 tokens.
constexpr int32_t kMinContext = 256;

struct Args {
  std::string model;
  std::string text;
  std::vector<int32_t> contexts = {2048, 4096, 8192};
  std::vector<int32_t> depths = {0, 25, 50, 75, 100};
  int32_t trials = 20;
  int32_t answer_tokens = 24;
  std::vector<SelectionMode> modes = {SelectionMode::kSoloHead, SelectionMode::kHeadWise};
  std::vector<int32_t> fractions = {8, 16};
  int32_t sink = SelectionDefaults{}.sink;
  int32_t window = SelectionDefaults{}.window;
  int32_t block = SelectionDefaults{}.block;
  std::string estimator = SelectionDefaults{}.estimator;
  bool agreement = true;
  int32_t prompts = 20;
  int32_t agree_tokens = 128;
  int32_t agree_min = 1024;
  int32_t agree_max = 4096;
  uint64_t seed = 0;
  bool cuda = false;  // else the CPU backend
  int32_t threads = 0;
  std::optional<DType> weights;  // default: f32 on the CPU, bf16 (all CUDA stores) on CUDA
  bool verbose = false;
  bool fp8 = false;  // --host-codec fp8
  std::string out;
  std::string command;  // the command line, for the records
};

absl::StatusOr<std::vector<int32_t>> ParseList(absl::string_view flag, absl::string_view text,
                                               int32_t min, int32_t max) {
  std::vector<int32_t> values;
  for (const absl::string_view item : absl::StrSplit(text, ',')) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value < min || value > max) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: bad list item '%s' (expected integers in [%d, %d], comma separated)",
                          flag, item, min, max));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<bool> ParseSwitch(absl::string_view flag, absl::string_view value) {
  if (value == "on" || value == "1" || value == "true" || value == "yes") return true;
  if (value == "off" || value == "0" || value == "false" || value == "no") return false;
  return absl::InvalidArgumentError(absl::StrCat(flag, ": expected on or off, got '", value, "'"));
}

std::string_view ModeName(SelectionMode mode) {
  return mode == SelectionMode::kHeadWise ? "headwise" : "solohead";
}

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) words.emplace_back(argv[i]);
  args.command = absl::StrJoin(words, " ");
  constexpr int32_t kMax = 1 << 20;
  for (int i = 1; i < argc; i += 2) {
    const absl::string_view flag = argv[i];
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    const absl::string_view value = argv[i + 1];
    bool ok = true;
    if (flag == "--model") {
      args.model = std::string(value);
    } else if (flag == "--text") {
      args.text = std::string(value);
    } else if (flag == "--contexts") {
      PULSE_ASSIGN_OR_RETURN(args.contexts, ParseList(flag, value, kMinContext, kMax));
    } else if (flag == "--depths") {
      PULSE_ASSIGN_OR_RETURN(args.depths, ParseList(flag, value, 0, 100));
    } else if (flag == "--fractions") {
      PULSE_ASSIGN_OR_RETURN(args.fractions, ParseList(flag, value, 1, kMax));
    } else if (flag == "--modes") {
      args.modes.clear();
      for (const absl::string_view item : absl::StrSplit(value, ',')) {
        if (item == "none" && value == "none") {
          break;  // dense only
        } else if (item == "solohead") {
          args.modes.push_back(SelectionMode::kSoloHead);
        } else if (item == "headwise") {
          args.modes.push_back(SelectionMode::kHeadWise);
        } else {
          return absl::InvalidArgumentError(absl::StrCat(
              "--modes: unknown mode '", item, "' (expected solohead, headwise, or none)"));
        }
      }
    } else if (flag == "--trials") {
      ok = absl::SimpleAtoi(value, &args.trials) && args.trials > 0 && args.trials <= kMax;
    } else if (flag == "--answer-tokens") {
      ok = absl::SimpleAtoi(value, &args.answer_tokens) && args.answer_tokens > 0 &&
           args.answer_tokens <= 4096;
    } else if (flag == "--sink") {
      ok = absl::SimpleAtoi(value, &args.sink) && args.sink >= 0 && args.sink <= kMax;
    } else if (flag == "--window") {
      ok = absl::SimpleAtoi(value, &args.window) && args.window >= 0 && args.window <= kMax;
    } else if (flag == "--block") {
      ok = absl::SimpleAtoi(value, &args.block) && args.block >= 2 && args.block <= 1024;
    } else if (flag == "--estimator") {
      args.estimator = std::string(value);
    } else if (flag == "--host-codec") {
      ok = value == "raw" || value == "fp8";
      args.fp8 = value == "fp8";
    } else if (flag == "--agreement") {
      PULSE_ASSIGN_OR_RETURN(args.agreement, ParseSwitch(flag, value));
    } else if (flag == "--prompts") {
      ok = absl::SimpleAtoi(value, &args.prompts) && args.prompts > 0 && args.prompts <= kMax;
    } else if (flag == "--agree-tokens") {
      ok = absl::SimpleAtoi(value, &args.agree_tokens) && args.agree_tokens > 0 &&
           args.agree_tokens <= 4096;
    } else if (flag == "--agree-min") {
      ok = absl::SimpleAtoi(value, &args.agree_min) && args.agree_min >= kMinContext &&
           args.agree_min <= kMax;
    } else if (flag == "--agree-max") {
      ok = absl::SimpleAtoi(value, &args.agree_max) && args.agree_max >= kMinContext &&
           args.agree_max <= kMax;
    } else if (flag == "--seed") {
      ok = absl::SimpleAtoi(value, &args.seed);
    } else if (flag == "--backend") {
      ok = value == "cpu" || value == "cuda";
      args.cuda = value == "cuda";
    } else if (flag == "--threads") {
      ok = absl::SimpleAtoi(value, &args.threads) && args.threads >= 0 && args.threads <= 1024;
    } else if (flag == "--weights") {
      if (value == "f32") {
        args.weights = DType::kF32;
      } else if (value == "bf16") {
        args.weights = DType::kBF16;
      } else {
        ok = false;
      }
    } else if (flag == "--verbose") {
      PULSE_ASSIGN_OR_RETURN(args.verbose, ParseSwitch(flag, value));
    } else if (flag == "--out") {
      args.out = std::string(value);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad value for ", flag, ": ", value));
  }
  if (args.model.empty() || args.text.empty()) {
    return absl::InvalidArgumentError("--model and --text are required");
  }
  if (args.agree_min > args.agree_max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--agree-min %d exceeds --agree-max %d", args.agree_min, args.agree_max));
  }
  PULSE_RETURN_IF_ERROR(ParseEstimator(args.estimator).status());
  return args;
}

// The text with newlines and control bytes escaped, for one line of progress.
std::string Escaped(std::string_view text) {
  const std::string json = nlohmann::json(std::string(text)).dump();
  return json.substr(1, json.size() - 2);
}

// A value drawn from a generator seeded with `parts` (the run's seed, what is drawn, where).
uint64_t Draw(std::initializer_list<uint64_t> parts) {
  std::vector<uint32_t> words;
  for (const uint64_t part : parts) {
    words.push_back(static_cast<uint32_t>(part));
    words.push_back(static_cast<uint32_t>(part >> 32));
  }
  std::seed_seq seed(words.begin(), words.end());
  return std::mt19937_64(seed)();
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// One way of attending.
struct Config {
  std::string mode;  // "dense", "solohead", "headwise"
  SelectionMode selection_mode = SelectionMode::kSoloHead;
  int32_t fraction = 0;  // 0: dense
  uint64_t key = 0;      // SparseSelection::key, fixed for the run

  bool dense() const { return fraction == 0; }
  std::string label() const { return dense() ? mode : absl::StrCat(mode, "/", fraction); }
};

std::vector<Config> Configs(const Args& args) {
  std::vector<Config> configs = {{.mode = "dense"}};
  uint64_t key = 1;
  for (const SelectionMode mode : args.modes) {
    for (const int32_t fraction : args.fractions) {
      configs.push_back({.mode = std::string(ModeName(mode)),
                         .selection_mode = mode,
                         .fraction = fraction,
                         .key = key++});
    }
  }
  return configs;
}

// What the whole run shares: the model, its tokenizer and template, the text, the runner.
struct Bench {
  const Args* args = nullptr;
  std::string model_name;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;
  std::vector<std::string> lines;      // the text, a line each, without '\n'
  std::vector<int64_t> line_prefix;    // tokens of lines [0, i), a line and its '\n' encoded alone
  std::vector<int32_t> speech_starts;  // lines that begin a paragraph (after an empty line)
  std::shared_ptr<const Model> model;
  std::optional<ModelRunner> runner;
  std::vector<Config> configs;
  int32_t shared_blocks = 0;  // blocks [0, shared_blocks) hold the shared prefill
  int32_t own_blocks = 0;     // then each config's own blocks, this many each
  std::unique_ptr<FILE, int (*)(FILE*)> out{nullptr, &std::fclose};

  int32_t block() const { return args->block; }
  int32_t max_position() const { return model->config().max_position; }

  std::optional<SparseSelection> Selection(const Config& config, int32_t context) const {
    if (config.dense()) return std::nullopt;
    // Fraction 1 covers the whole context, the tokens generated included: every block is
    // selected, so the configuration must decode exactly as dense does (a check of the harness).
    const int32_t budget =
        config.fraction == 1 ? max_position() : context / config.fraction / block() * block();
    return SparseSelection{.options = {.mode = config.selection_mode,
                                       .budget_tokens = budget,
                                       .sink_tokens = args->sink,
                                       .window_tokens = args->window},
                           .key = config.key};
  }

  bool EndsGeneration(int32_t token) const {
    if (token == tokenizer->eos_id()) return true;
    const std::span<const int32_t> ends = tokenizer->end_of_generation_ids();
    return std::find(ends.begin(), ends.end(), token) != ends.end();
  }

  std::vector<int32_t> EncodePrompt(const std::string& user) const {
    const ChatMessage message{.role = "user", .content = user};
    const absl::StatusOr<std::string> text = chat->Render({&message, 1}, true);
    if (!text.ok()) return {};
    // The template writes the special tokens (and BOS, where it has one) itself.
    return tokenizer->Encode(*text, {.add_special = false, .parse_special = true});
  }
};

// The user message: lines [first, first + count) of the text, with `needle` as a line of its own
// before line first + needle_at (when not empty), then `tail`.
std::string Message(const Bench& bench, int32_t first, int32_t count, const std::string& needle,
                    int32_t needle_at, std::string_view tail) {
  std::string text;
  for (int32_t i = 0; i <= count; ++i) {
    if (!needle.empty() && i == needle_at) absl::StrAppend(&text, needle, "\n");
    if (i < count) absl::StrAppend(&text, bench.lines[static_cast<size_t>(first + i)], "\n");
  }
  text.append(tail);
  return text;
}

struct Prompt {
  std::vector<int32_t> tokens;
  int32_t first_line = 0;
  int32_t lines = 0;
};

// A prompt of at most `target` tokens, as many lines of the text from line `first` as fit, the
// needle (if any) at `depth` percent of them.
absl::StatusOr<Prompt> FitPrompt(const Bench& bench, int32_t first, int32_t target,
                                 const std::string& needle, int32_t depth, std::string_view tail) {
  const auto available = static_cast<int32_t>(bench.lines.size()) - first;
  auto build = [&](int32_t count) {
    const int32_t needle_at = static_cast<int32_t>(std::lround(depth / 100.0 * count));
    return bench.EncodePrompt(Message(bench, first, count, needle, needle_at, tail));
  };
  std::vector<int32_t> tokens = build(0);
  if (tokens.empty()) return absl::InternalError("the chat template cannot render the prompt");
  const int64_t room = int64_t{target} - static_cast<int64_t>(tokens.size());
  if (room <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a prompt of %d tokens cannot hold any text (the template, needle and request take %d)",
        target, tokens.size()));
  }
  // The estimate from lines encoded alone, then exact counts.
  const int64_t base = bench.line_prefix[static_cast<size_t>(first)];
  int32_t count = static_cast<int32_t>(
      std::upper_bound(bench.line_prefix.begin() + first, bench.line_prefix.end(), base + room) -
      bench.line_prefix.begin() - first - 1);
  count = std::clamp(count, 0, available);
  tokens = build(count);
  for (int iteration = 0; static_cast<int64_t>(tokens.size()) > target && count > 0; ++iteration) {
    // Drop the lines the surplus amounts to (at least one; one at a time after a few tries).
    const int64_t surplus = static_cast<int64_t>(tokens.size()) - target;
    int32_t drop = 1;
    if (iteration < 4) {
      const int64_t end = bench.line_prefix[static_cast<size_t>(first + count)];
      while (drop < count &&
             end - bench.line_prefix[static_cast<size_t>(first + count - drop)] < surplus) {
        ++drop;
      }
    }
    count -= drop;
    tokens = build(count);
  }
  while (count < available) {
    std::vector<int32_t> longer = build(count + 1);
    if (static_cast<int64_t>(longer.size()) > target) break;
    tokens = std::move(longer);
    ++count;
  }
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "line %d of the text alone makes a prompt of more than %d tokens", first + 1, target));
  }
  if (static_cast<int64_t>(tokens.size()) > target) {
    return absl::InternalError(absl::StrFormat("no prompt of at most %d tokens", target));
  }
  return Prompt{.tokens = std::move(tokens), .first_line = first, .lines = count};
}

// A seeded first line, from which the text has tokens enough for `target` tokens: a paragraph's
// first line when there is one.
absl::StatusOr<int32_t> PickFirstLine(const Bench& bench, int32_t target, uint64_t draw) {
  const int64_t need = int64_t{target} + target / 4 + 64;
  const int64_t total = bench.line_prefix.back();
  if (total < need) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the text has %d tokens; a prompt of %d tokens needs about %d", total, target, need));
  }
  // The last line from which `need` tokens follow.
  const auto last = static_cast<int32_t>(
      std::upper_bound(bench.line_prefix.begin(), bench.line_prefix.end(), total - need) -
      bench.line_prefix.begin() - 1);
  const auto end = std::upper_bound(bench.speech_starts.begin(), bench.speech_starts.end(), last);
  const auto starts = static_cast<uint64_t>(end - bench.speech_starts.begin());
  if (starts > 0) return bench.speech_starts[draw % starts];
  return static_cast<int32_t>(draw % static_cast<uint64_t>(last + 1));
}

// Prefills prompt[0, shared) densely into the shared blocks (summarised, for the sparse configs).
absl::Status PrefillShared(Bench& bench, std::span<const int32_t> prompt, int32_t shared) {
  std::vector<int32_t> table(static_cast<size_t>(shared / bench.block()));
  std::iota(table.begin(), table.end(), 0);
  // Any sparse selection summarises the blocks a chunk fills; a chunk of several tokens attends
  // densely.
  const std::optional<SparseSelection> summarise = SparseSelection{
      .options = {.sink_tokens = bench.args->sink, .window_tokens = bench.args->window}, .key = 0};
  StepBatch batch;
  std::vector<float> none;
  for (int32_t start = 0; start < shared;) {
    int32_t chunk = std::min(kPrefillChunk, shared - start);
    if (shared - start - chunk == 1) --chunk;  // a chunk of one token would decode sparsely
    batch.Clear();
    batch.AddSequence(prompt.subspan(start, chunk), start, table, LogitRows::kNone, summarise);
    PULSE_RETURN_IF_ERROR(bench.runner->Forward(batch, none));
    start += chunk;
  }
  if (!bench.args->fp8) return absl::OkStatus();
  const int32_t block = bench.block();
  return RoundTripFp8(*bench.runner, (bench.args->sink + block - 1) / block,
                      std::max(0, shared - bench.args->window) / block);
}

// Tokens in the shared prefill of a prompt of `size` tokens: whole blocks, short of the last
// token.
int32_t SharedTokens(int32_t size, int32_t block) { return (size - 1) / block * block; }

struct Generation {
  std::vector<int32_t> tokens;  // without the end-of-generation token
  bool ended = false;           // an end-of-generation token came
  SparseAttentionStats stats;   // of this generation's sparse steps
};

SparseAttentionStats Minus(const SparseAttentionStats& a, const SparseAttentionStats& b) {
  return {.selections = a.selections - b.selections,
          .candidate_blocks = a.candidate_blocks - b.candidate_blocks,
          .picked_blocks = a.picked_blocks - b.picked_blocks,
          .reused_blocks = a.reused_blocks - b.reused_blocks,
          .attended_tokens = a.attended_tokens - b.attended_tokens,
          .context_tokens = a.context_tokens - b.context_tokens};
}

int32_t Argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Continues config `c` from the shared prefill of `prompt`: the rest of the prompt, then up to
// `max_new` greedy tokens, until an end-of-generation token or `done` says so.
template <typename Done>
absl::StatusOr<Generation> Generate(Bench& bench, size_t c, std::span<const int32_t> prompt,
                                    int32_t max_new, Done done) {
  const Config& config = bench.configs[c];
  const auto size = static_cast<int32_t>(prompt.size());
  const int32_t block = bench.block();
  const int32_t shared = SharedTokens(size, block);
  const int32_t own = (size + max_new - shared + block - 1) / block;
  if (own > bench.own_blocks) return absl::InternalError("a generation outgrows its blocks");
  std::vector<int32_t> table(static_cast<size_t>(shared / block));
  std::iota(table.begin(), table.end(), 0);
  const int32_t own_first = bench.shared_blocks + static_cast<int32_t>(c) * bench.own_blocks;
  for (int32_t b = 0; b < own; ++b) table.push_back(own_first + b);
  const std::optional<SparseSelection> sparse = bench.Selection(config, size);
  const SparseAttentionStats before =
      sparse ? bench.runner->sparse_stats(sparse->key) : SparseAttentionStats{};

  StepBatch batch;
  std::vector<float> none;
  if (size - 1 > shared) {
    // The prompt's tokens after the shared blocks but its last: a chunk, dense, filling no block.
    batch.AddSequence(prompt.subspan(shared, size - 1 - shared), shared, table, LogitRows::kNone);
    PULSE_RETURN_IF_ERROR(bench.runner->Forward(batch, none));
  }
  std::vector<float> logits(static_cast<size_t>(bench.model->config().vocab_size));
  Generation generation;
  int32_t token = prompt[static_cast<size_t>(size - 1)];
  for (int32_t position = size - 1; position < size - 1 + max_new; ++position) {
    batch.Clear();
    batch.AddSequence({&token, 1}, position, table, LogitRows::kLast, sparse);
    PULSE_RETURN_IF_ERROR(bench.runner->Forward(batch, logits));
    token = Argmax(logits);
    if (bench.EndsGeneration(token)) {
      generation.ended = true;
      break;
    }
    generation.tokens.push_back(token);
    if (done(generation.tokens)) break;
  }
  if (sparse) generation.stats = Minus(bench.runner->sparse_stats(sparse->key), before);
  return generation;
}

// The first run of exactly 5 digits in `text`; with `closed`, only one that a non-digit follows.
std::optional<std::string> FiveDigits(std::string_view text, bool closed) {
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] < '0' || text[i] > '9') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (end - i == 5 && (!closed || end < text.size())) return std::string(text.substr(i, 5));
    i = end;
  }
  return std::nullopt;
}

std::string Decode(const Bench& bench, std::span<const int32_t> tokens) {
  return bench.tokenizer->Decode(tokens, {});
}

// The start and end of a prompt, special tokens shown, on stderr.
void ShowPrompt(const Bench& bench, std::span<const int32_t> prompt) {
  const std::string text = bench.tokenizer->Decode(prompt, {.render_special = true});
  constexpr size_t kShown = 400;
  if (text.size() <= 2 * kShown) {
    std::fprintf(stderr, "prompt:\n%s\n", text.c_str());
  } else {
    std::fprintf(stderr, "prompt:\n%s\n[...]\n%s\n", text.substr(0, kShown).c_str(),
                 text.substr(text.size() - kShown).c_str());
  }
}

// Writes a record, with what every record of the run shares, when there is an output file.
void Write(const Bench& bench, nlohmann::json record) {
  if (bench.out == nullptr) return;
  const Args& args = *bench.args;
  record["model"] = bench.model_name;
  record["block_tokens"] = args.block;
  record["estimator"] = args.estimator;
  record["default"] = !args.fp8 && SelectionDefaults{}.Match(args.block, args.sink, args.window,
                                                             *ParseEstimator(args.estimator));
  record["host_codec"] = args.fp8 ? "fp8" : "raw";
  record["aggregate"] = "softmax-sum";
  record["sink"] = args.sink;
  record["window"] = args.window;
  record["seed"] = args.seed;
  record["backend"] = args.cuda ? "cuda" : "cpu";
  record["command"] = args.command;
  std::fprintf(bench.out.get(), "%s\n", record.dump().c_str());
  std::fflush(bench.out.get());
}

// One (context, depth)'s totals for a config.
struct PasskeyCell {
  int32_t correct = 0;
  int64_t attended_tokens = 0;
  int64_t context_tokens = 0;
};

absl::Status RunPasskey(Bench& bench) {
  const Args& args = *bench.args;
  const std::vector<Config>& configs = bench.configs;
  std::printf(
      "passkey retrieval: correct/trials (columns: mode/fraction; budget = context / "
      "fraction, whole blocks)\n");
  std::string header = absl::StrFormat("%7s %6s %7s", "context", "depth", "tokens");
  for (const Config& config : configs)
    absl::StrAppend(&header, absl::StrFormat(" %13s", config.label()));
  std::printf("%s\n", header.c_str());
  std::fflush(stdout);
  for (const int32_t context : args.contexts) {
    const int32_t target = std::min(context, bench.max_position() - args.answer_tokens);
    std::string budgets;
    for (const Config& config : configs) {
      if (config.dense()) continue;
      const SelectionOptions options = bench.Selection(config, context)->options;
      const BlockPartition partition = PartitionBlocks(target, args.block, options);
      absl::StrAppend(&budgets, budgets.empty() ? "" : ", ", config.label(), " ",
                      options.budget_tokens, " tokens (", partition.picks, " of ",
                      partition.num_candidates(), " candidate blocks)");
    }
    std::fprintf(stderr, "context %d: prompts of at most %d tokens; budgets: %s\n", context, target,
                 budgets.empty() ? "-" : budgets.c_str());
    for (const int32_t depth : args.depths) {
      std::vector<PasskeyCell> cells(configs.size());
      int64_t prompt_tokens = 0;
      int32_t shortest = target;
      int32_t longest = 0;
      const auto started = std::chrono::steady_clock::now();
      for (int32_t trial = 0; trial < args.trials; ++trial) {
        const auto trial_started = std::chrono::steady_clock::now();
        const int32_t passkey =
            10000 + static_cast<int32_t>(
                        Draw({args.seed, 1, static_cast<uint64_t>(context),
                              static_cast<uint64_t>(depth), static_cast<uint64_t>(trial)}) %
                        90000);
        // The depths of a trial share their filler.
        PULSE_ASSIGN_OR_RETURN(const int32_t first,
                               PickFirstLine(bench, target,
                                             Draw({args.seed, 2, static_cast<uint64_t>(context),
                                                   static_cast<uint64_t>(trial)})));
        PULSE_ASSIGN_OR_RETURN(const Prompt prompt,
                               FitPrompt(bench, first, target, Needle(passkey), depth,
                                         std::string("\n").append(kQuestion)));
        const auto size = static_cast<int32_t>(prompt.tokens.size());
        prompt_tokens += size;
        shortest = std::min(shortest, size);
        longest = std::max(longest, size);
        const auto prefill_started = std::chrono::steady_clock::now();
        PULSE_RETURN_IF_ERROR(PrefillShared(bench, prompt.tokens, SharedTokens(size, args.block)));
        const double prefill_seconds = Seconds(prefill_started);
        if (args.verbose && context == args.contexts.front() && depth == args.depths.front() &&
            trial == 0) {
          ShowPrompt(bench, prompt.tokens);
        }
        const std::string expected = std::to_string(passkey);
        std::string line;
        std::string texts;
        for (size_t c = 0; c < configs.size(); ++c) {
          PULSE_ASSIGN_OR_RETURN(
              const Generation generation,
              Generate(bench, c, prompt.tokens, args.answer_tokens,
                       [&](std::span<const int32_t> tokens) {
                         return FiveDigits(Decode(bench, tokens), /*closed=*/true).has_value();
                       }));
          const std::string text = Decode(bench, generation.tokens);
          const std::optional<std::string> answer = FiveDigits(text, /*closed=*/false);
          const bool correct = answer.has_value() && *answer == expected;
          cells[c].correct += correct ? 1 : 0;
          cells[c].attended_tokens += generation.stats.attended_tokens;
          cells[c].context_tokens += generation.stats.context_tokens;
          absl::StrAppend(&line, " ", configs[c].label(), " ", answer.value_or("-----"),
                          correct ? " ok" : " NO");
          if (args.verbose) {
            absl::StrAppend(&texts, "    ", configs[c].label(), ": \"", Escaped(text), "\"\n");
          }
        }
        std::fprintf(stderr,
                     "[context %d depth %d trial %d/%d] key %d, %d tokens (lines %d+%d), prefill "
                     "%.1f s, %.1f s:%s\n%s",
                     context, depth, trial + 1, args.trials, passkey, size, prompt.first_line,
                     prompt.lines, prefill_seconds, Seconds(trial_started), line.c_str(),
                     texts.c_str());
      }
      const auto mean_tokens =
          static_cast<int32_t>(std::lround(static_cast<double>(prompt_tokens) / args.trials));
      std::string row = absl::StrFormat("%7d %5d%% %7d", context, depth, mean_tokens);
      for (size_t c = 0; c < configs.size(); ++c) {
        const Config& config = configs[c];
        absl::StrAppend(&row,
                        absl::StrFormat(" %13s", absl::StrCat(cells[c].correct, "/", args.trials)));
        const int32_t budget =
            config.dense() ? 0 : bench.Selection(config, context)->options.budget_tokens;
        const double attended =
            cells[c].context_tokens > 0
                ? static_cast<double>(cells[c].attended_tokens) / cells[c].context_tokens
                : 1.0;
        Write(bench,
              {{"bench", "retrieval"},
               {"mode", config.mode},
               {"budget", config.dense() ? nlohmann::json() : nlohmann::json(budget)},
               {"fraction", config.dense() ? nlohmann::json() : nlohmann::json(config.fraction)},
               {"context", mean_tokens},
               {"context_target", context},
               {"context_min", shortest},
               {"context_max", longest},
               {"depth", depth},
               {"trials", args.trials},
               {"correct", cells[c].correct},
               {"correct_dense", cells[0].correct},
               {"answer_tokens", args.answer_tokens},
               {"attended_fraction", attended},
               {"seconds", Seconds(started)}});
      }
      std::printf("%s\n", row.c_str());
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

// A config's agreement with dense over the prompts.
struct AgreementTotals {
  double leading = 0;             // sum over prompts of the common prefix / tokens
  std::vector<int64_t> equal_at;  // prompts whose token at position i is dense's
  int64_t attended_tokens = 0;
  int64_t context_tokens = 0;
};

absl::Status RunAgreement(Bench& bench) {
  const Args& args = *bench.args;
  const std::vector<Config>& configs = bench.configs;
  const auto n = static_cast<size_t>(args.agree_tokens);
  std::vector<AgreementTotals> totals(configs.size());
  for (AgreementTotals& total : totals) total.equal_at.assign(n, 0);
  int64_t dense_tokens = 0;
  int32_t dense_ended = 0;
  int32_t shortest = 0;
  int32_t longest = 0;
  const auto started = std::chrono::steady_clock::now();
  for (int32_t p = 0; p < args.prompts; ++p) {
    const auto prompt_started = std::chrono::steady_clock::now();
    const int32_t length =
        args.prompts == 1
            ? args.agree_min
            : args.agree_min + static_cast<int32_t>(int64_t{args.agree_max - args.agree_min} * p /
                                                    (args.prompts - 1));
    const int32_t target = std::min(length, bench.max_position() - args.agree_tokens);
    PULSE_ASSIGN_OR_RETURN(
        const int32_t first,
        PickFirstLine(bench, target, Draw({args.seed, 3, static_cast<uint64_t>(p)})));
    PULSE_ASSIGN_OR_RETURN(const Prompt prompt, FitPrompt(bench, first, target, "", 0,
                                                          std::string("\n").append(kRequest)));
    const auto size = static_cast<int32_t>(prompt.tokens.size());
    shortest = p == 0 ? size : std::min(shortest, size);
    longest = std::max(longest, size);
    const auto prefill_started = std::chrono::steady_clock::now();
    PULSE_RETURN_IF_ERROR(PrefillShared(bench, prompt.tokens, SharedTokens(size, args.block)));
    const double prefill_seconds = Seconds(prefill_started);
    std::vector<int32_t> dense;  // padded with -1 after the end
    std::string line;
    std::string texts;
    for (size_t c = 0; c < configs.size(); ++c) {
      PULSE_ASSIGN_OR_RETURN(const Generation generation,
                             Generate(bench, c, prompt.tokens, args.agree_tokens,
                                      [](std::span<const int32_t>) { return false; }));
      std::vector<int32_t> padded = generation.tokens;
      padded.resize(n, -1);
      if (c == 0) {
        dense = padded;
        dense_tokens += static_cast<int64_t>(generation.tokens.size());
        dense_ended += generation.ended ? 1 : 0;
        absl::StrAppend(&line, " dense ", generation.tokens.size(), " tokens",
                        generation.ended ? " (ended)" : "");
      } else {
        size_t leading = 0;
        while (leading < n && padded[leading] == dense[leading]) ++leading;
        int64_t equal = 0;
        for (size_t i = 0; i < n; ++i) {
          const bool same = padded[i] == dense[i];
          totals[c].equal_at[i] += same ? 1 : 0;
          equal += same ? 1 : 0;
        }
        totals[c].leading += static_cast<double>(leading) / static_cast<double>(n);
        totals[c].attended_tokens += generation.stats.attended_tokens;
        totals[c].context_tokens += generation.stats.context_tokens;
        absl::StrAppend(&line, ", ", configs[c].label(), " lead ", leading, " same ", equal);
      }
      if (args.verbose) {
        absl::StrAppend(&texts, "    ", configs[c].label(), ": \"",
                        Escaped(Decode(bench, generation.tokens)), "\"\n");
      }
    }
    std::fprintf(stderr,
                 "[agreement prompt %d/%d] %d tokens (lines %d+%d), prefill %.1f s, %.1f s:%s\n%s",
                 p + 1, args.prompts, size, prompt.first_line, prompt.lines, prefill_seconds,
                 Seconds(prompt_started), line.c_str(), texts.c_str());
  }
  std::printf(
      "\nfree-running agreement with dense: %d prompts of %d-%d tokens, %d tokens each "
      "(dense: %.1f tokens on average, %d ended early)\n",
      args.prompts, shortest, longest, args.agree_tokens,
      static_cast<double>(dense_tokens) / args.prompts, dense_ended);
  std::printf("%-9s %8s %8s %8s %9s\n", "mode", "fraction", "leading", "tokens", "attended");
  for (size_t c = 1; c < configs.size(); ++c) {
    const Config& config = configs[c];
    const AgreementTotals& total = totals[c];
    const double leading = total.leading / args.prompts;
    const double token = static_cast<double>(std::accumulate(total.equal_at.begin(),
                                                             total.equal_at.end(), int64_t{0})) /
                         (static_cast<double>(n) * args.prompts);
    const double attended = total.context_tokens > 0
                                ? static_cast<double>(total.attended_tokens) / total.context_tokens
                                : 1.0;
    std::printf("%-9s %8d %8.3f %8.3f %9.3f\n", config.mode.c_str(), config.fraction, leading,
                token, attended);
    if (bench.out == nullptr) continue;
    std::vector<double> positions;
    for (const int64_t equal : total.equal_at) {
      positions.push_back(static_cast<double>(equal) / args.prompts);
    }
    Write(bench, {{"bench", "agreement"},
                  {"mode", config.mode},
                  {"budget_fraction", config.fraction},
                  {"prompts", args.prompts},
                  {"tokens", args.agree_tokens},
                  {"prompt_tokens_min", shortest},
                  {"prompt_tokens_max", longest},
                  {"leading_agreement", leading},
                  {"token_agreement", token},
                  {"position_agreement", positions},
                  {"dense_tokens_mean", static_cast<double>(dense_tokens) / args.prompts},
                  {"dense_ended", dense_ended},
                  {"attended_fraction", attended},
                  {"seconds", Seconds(started)}});
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

// Loads what the run needs and checks the arguments against the model and the text (the
// failures here are the caller's to fix: exit status 2).
absl::StatusOr<std::unique_ptr<Bench>> Setup(const Args& args) {
  auto bench = std::make_unique<Bench>();
  bench->args = &args;
  bench->model_name = args.model.substr(args.model.find_last_of('/') + 1);
  PULSE_ASSIGN_OR_RETURN(const GgufFile gguf, GgufFile::Open(args.model));
  PULSE_ASSIGN_OR_RETURN(bench->tokenizer, Tokenizer::FromGguf(gguf));
  const Tokenizer& tokenizer = *bench->tokenizer;
  auto special = [&](int32_t id) { return id < 0 ? std::string_view() : tokenizer.TokenPiece(id); };
  PULSE_ASSIGN_OR_RETURN(
      bench->chat, ChatTemplate::Recognize(tokenizer.chat_template(), special(tokenizer.bos_id()),
                                           special(tokenizer.eos_id())));

  std::ifstream file(args.text, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read ", args.text));
  std::stringstream text;
  text << file.rdbuf();
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    bench->lines.emplace_back(line);
  }
  if (!bench->lines.empty() && bench->lines.back().empty()) bench->lines.pop_back();
  bench->line_prefix.assign(1, 0);
  for (size_t i = 0; i < bench->lines.size(); ++i) {
    const std::string& line = bench->lines[i];
    bench->line_prefix.push_back(
        bench->line_prefix.back() +
        static_cast<int64_t>(
            tokenizer
                .Encode(absl::StrCat(line, "\n"), {.add_special = false, .parse_special = true})
                .size()));
    if (!line.empty() && (i == 0 || bench->lines[i - 1].empty())) {
      bench->speech_starts.push_back(static_cast<int32_t>(i));
    }
  }

  PULSE_ASSIGN_OR_RETURN(const std::unique_ptr<TensorSource> source, OpenTensorSource(args.model));
  PULSE_ASSIGN_OR_RETURN(
      std::shared_ptr<Backend> backend,
      args.cuda ? CreateCudaBackend({}) : CreateCpuBackend({.threads = args.threads}));
  PULSE_ASSIGN_OR_RETURN(
      bench->model,
      Model::Load(std::move(backend), *source,
                  {.weight_type = args.weights.value_or(args.cuda ? DType::kBF16 : DType::kF32)}));
  const ModelConfig& config = bench->model->config();
  int32_t longest = 0;
  for (const int32_t context : args.contexts) {
    if (context > config.max_position) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--contexts: %d tokens exceed the model's context of %d", context, config.max_position));
    }
    longest = std::max(longest, std::min(context, config.max_position - args.answer_tokens));
  }
  if (args.agreement) {
    if (args.agree_max > config.max_position) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--agree-max: %d tokens exceed the model's context of %d", args.agree_max,
                          config.max_position));
    }
    longest = std::max(longest, std::min(args.agree_max, config.max_position - args.agree_tokens));
  }
  // Every prompt must fit the text (checked now, not after an hour of runs).
  for (const int32_t context : args.contexts) {
    PULSE_RETURN_IF_ERROR(
        PickFirstLine(*bench, std::min(context, config.max_position - args.answer_tokens), 0)
            .status());
  }
  if (args.agreement) PULSE_RETURN_IF_ERROR(PickFirstLine(*bench, longest, 0).status());

  bench->configs = Configs(args);
  const int32_t max_new = std::max(args.answer_tokens, args.agreement ? args.agree_tokens : 0);
  const int32_t block = args.block;
  bench->shared_blocks = longest / block + 1;
  bench->own_blocks = (block + max_new + block - 1) / block + 1;
  const int32_t num_blocks =
      bench->shared_blocks + static_cast<int32_t>(bench->configs.size()) * bench->own_blocks;
  const PagedKvLayout layout{.block_tokens = block,
                             .num_kv_heads = config.num_kv_heads,
                             .head_dim = config.head_dim,
                             .type = bench->model->backend().kv_type()};
  PULSE_ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(bench->model->backend(), layout,
                                                        config.num_layers, num_blocks));
  // Sparse attention over resident blocks only (no host tier): each sequence's own selection.
  OffloadConfig offload;
  PULSE_ASSIGN_OR_RETURN(offload.estimator, ParseEstimator(args.estimator));
  PULSE_ASSIGN_OR_RETURN(ModelRunner runner,
                         ModelRunner::Create(bench->model, std::move(cache),
                                             {.max_step_tokens = std::max(kPrefillChunk, block),
                                              .max_seqs = 1,
                                              .max_blocks_per_seq = (longest + max_new) / block + 2,
                                              .max_logit_rows = 1,
                                              .offload = offload}));
  bench->runner.emplace(std::move(runner));
  if (!args.out.empty()) {
    bench->out.reset(std::fopen(args.out.c_str(), "w"));
    if (bench->out == nullptr) return absl::NotFoundError(absl::StrCat("cannot write ", args.out));
  }
  return bench;
}

absl::Status Run(const Args& args) {
  const auto started = std::chrono::steady_clock::now();
  PULSE_ASSIGN_OR_RETURN(const std::unique_ptr<Bench> bench, Setup(args));
  std::fprintf(stderr,
               "pulse-retrieval: loaded in %.1f s (%zu lines of text, %lld tokens); "
               "configurations:",
               Seconds(started), bench->lines.size(),
               static_cast<long long>(bench->line_prefix.back()));
  for (const Config& config : bench->configs) std::fprintf(stderr, " %s", config.label().c_str());
  std::fprintf(stderr, "\n");
  PULSE_RETURN_IF_ERROR(RunPasskey(*bench));
  if (args.agreement) PULSE_RETURN_IF_ERROR(RunAgreement(*bench));
  std::fprintf(stderr, "pulse-retrieval: done in %.1f s\n", Seconds(started));
  return absl::OkStatus();
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-retrieval", pulse::kUsage, pulse::ParseArgs(argc, argv),
                        &pulse::Run);
}
