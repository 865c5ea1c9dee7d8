// pulse-dump-logits: runs one prompt through the Engine and dumps what the reference tests
// compare against an independent forward pass.
//
//   pulse-dump-logits --model PATH|random:CONFIG_JSON --prompt-ids 1,2,3 [--backend cpu|cuda]
//       [--weight-type f32|bf16|quantized] [--logits OUT.f32] [--all-logits OUT.f32] [--greedy N]
//       [--chunk C] [--seed S]
//
// Loads PATH (GGUF file or Hugging Face directory), or seeded random weights (--seed, default 0)
// for the config.json CONFIG_JSON (or a directory holding one), on the CPU (default, f32 weights)
// or CUDA backend (bf16 weights). Prefills the prompt in chunks of C tokens (default: the whole
// prompt in one step), writes the logits of the last prompt position ([vocab] float32,
// little-endian) to --logits, those of every prompt position ([prompt][vocab]) to --all-logits,
// and prints the N greedy tokens that follow (end of sequence does not stop them) as one
// comma-separated line on stdout. Errors go to stderr with exit status 1.
#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/base/mapped_file.h"
#include "core/format/hf_config.h"
#include "core/kv/kv_cache.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "core/model/tensor_source.h"
#include "core/sched/engine.h"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

static_assert(std::endian::native == std::endian::little, "the logits file is little-endian");

constexpr std::string_view kUsage =
    "usage: pulse-dump-logits --model PATH|random:CONFIG_JSON --prompt-ids 1,2,3 "
    "[--backend cpu|cuda] [--weight-type f32|bf16|quantized] [--logits OUT.f32] [--all-logits "
    "OUT.f32] "
    "[--greedy N] [--chunk C] [--seed S]";
constexpr absl::string_view kRandomPrefix = "random:";

struct Args {
  std::string model;
  std::vector<int32_t> prompt;
  bool cuda = false;
  std::optional<DType> weight_type;  // default: the backend's
  bool keep_blocks = false;
  std::string logits_path;
  std::string all_logits_path;
  int32_t greedy = 0;
  int32_t chunk = 0;  // 0: the whole prompt
  uint64_t seed = 0;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; i += 2) {
    const absl::string_view flag = argv[i];
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    const absl::string_view value = argv[i + 1];
    const auto bad_value = [&] {
      return absl::InvalidArgumentError(absl::StrFormat("bad value for %s: '%s'", flag, value));
    };
    if (flag == "--model") {
      args.model = std::string(value);
    } else if (flag == "--prompt-ids") {
      for (const absl::string_view id : absl::StrSplit(value, ',')) {
        int32_t token = 0;
        if (!absl::SimpleAtoi(id, &token)) return bad_value();
        args.prompt.push_back(token);
      }
    } else if (flag == "--weight-type") {
      if (value == "f32") {
        args.weight_type = DType::kF32;
      } else if (value == "bf16") {
        args.weight_type = DType::kBF16;
      } else if (value == "quantized") {  // blocks kept where computed on, the rest f32
        args.weight_type = DType::kF32;
        args.keep_blocks = true;
      } else {
        return bad_value();
      }
    } else if (flag == "--backend") {
      if (value != "cpu" && value != "cuda") return bad_value();
      args.cuda = value == "cuda";
    } else if (flag == "--logits") {
      args.logits_path = std::string(value);
    } else if (flag == "--all-logits") {
      args.all_logits_path = std::string(value);
    } else if (flag == "--greedy") {
      if (!absl::SimpleAtoi(value, &args.greedy) || args.greedy < 0) return bad_value();
    } else if (flag == "--chunk") {
      if (!absl::SimpleAtoi(value, &args.chunk) || args.chunk < 1) return bad_value();
    } else if (flag == "--seed") {
      if (!absl::SimpleAtoi(value, &args.seed)) return bad_value();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
  }
  if (args.model.empty() || args.prompt.empty()) {
    return absl::InvalidArgumentError("--model and --prompt-ids are required");
  }
  return args;
}

absl::StatusOr<std::unique_ptr<TensorSource>> OpenSource(const Args& args) {
  if (!absl::StartsWith(args.model, kRandomPrefix)) return OpenTensorSource(args.model);
  std::filesystem::path config_path(args.model.substr(kRandomPrefix.size()));
  if (std::filesystem::is_directory(config_path)) config_path /= "config.json";
  PULSE_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::Open(config_path.string()));
  const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()),
                              file.bytes().size());
  PULSE_ASSIGN_OR_RETURN(const ModelConfig config, ParseHfConfig(text));
  return OpenRandomSource(config, args.seed);
}

absl::Status WriteLogits(const std::string& path, std::span<const float> logits) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size_bytes()));
  out.close();
  if (!out) return absl::UnavailableError(absl::StrFormat("cannot write '%s'", path));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Model>> LoadModel(const Args& args) {
  PULSE_ASSIGN_OR_RETURN(const std::unique_ptr<TensorSource> source, OpenSource(args));
  std::shared_ptr<Backend> backend;
  if (args.cuda) {
    PULSE_ASSIGN_OR_RETURN(backend, CreateCudaBackend({}));
  } else {
    PULSE_ASSIGN_OR_RETURN(backend, CreateCpuBackend({}));
  }
  const DType weight_type = args.weight_type.value_or(args.cuda ? DType::kBF16 : DType::kF32);
  return Model::Load(std::move(backend), *source,
                     {.weight_type = weight_type, .keep_blocks = args.keep_blocks});
}

// The logits of every prompt position, [prompt][vocab], by the ModelRunner in chunks.
absl::StatusOr<std::vector<float>> AllLogits(std::shared_ptr<const Model> model, const Args& args) {
  const int32_t prompt_tokens = static_cast<int32_t>(args.prompt.size());
  const int32_t chunk = args.chunk > 0 ? std::min(args.chunk, prompt_tokens) : prompt_tokens;
  const ModelConfig& config = model->config();
  const PagedKvLayout layout{.block_tokens = 32,
                             .num_kv_heads = config.num_kv_heads,
                             .head_dim = config.head_dim,
                             .type = model->backend().kv_type()};
  const int32_t num_blocks = (prompt_tokens + layout.block_tokens - 1) / layout.block_tokens;
  PULSE_ASSIGN_OR_RETURN(KvCache cache,
                         KvCache::Create(model->backend(), layout, config.num_layers, num_blocks));
  PULSE_ASSIGN_OR_RETURN(ModelRunner runner, ModelRunner::Create(model, std::move(cache),
                                                                 {.max_step_tokens = chunk,
                                                                  .max_seqs = 1,
                                                                  .max_blocks_per_seq = num_blocks,
                                                                  .max_logit_rows = chunk}));
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  const size_t vocab = static_cast<size_t>(config.vocab_size);
  std::vector<float> logits(static_cast<size_t>(prompt_tokens) * vocab);
  StepBatch batch;
  for (int32_t begin = 0; begin < prompt_tokens; begin += chunk) {
    const int32_t count = std::min(chunk, prompt_tokens - begin);
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(args.prompt).subspan(begin, count), begin, blocks,
                      LogitRows::kAll);
    PULSE_RETURN_IF_ERROR(
        runner.Forward(batch, std::span<float>(logits).subspan(begin * vocab, count * vocab)));
  }
  return logits;
}

absl::Status Run(const Args& args) {
  PULSE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, LoadModel(args));
  if (!args.all_logits_path.empty()) {
    PULSE_ASSIGN_OR_RETURN(const std::vector<float> all, AllLogits(model, args));
    PULSE_RETURN_IF_ERROR(WriteLogits(args.all_logits_path, all));
  }

  const int32_t prompt_tokens = static_cast<int32_t>(args.prompt.size());
  const int32_t max_tokens = std::max(args.greedy, 1);  // the logits come with the first token
  EngineOptions options;
  options.max_batch = 1;
  options.prefill_chunk = args.chunk > 0 ? args.chunk : prompt_tokens;
  options.max_step_tokens = options.prefill_chunk;
  options.max_context = std::min(prompt_tokens + max_tokens, model->config().max_position);
  options.kv_capacity_tokens = options.max_context;
  options.logits_to_host = true;  // the sink reads the first token's logits
  PULSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, options));

  std::vector<float> logits;
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  const auto sink = [&logits](const TokenEvent& event) {
    if (event.index == 0) logits.assign(event.logits.begin(), event.logits.end());
    return true;
  };
  PULSE_ASSIGN_OR_RETURN(const RequestId id, engine->Submit(args.prompt, params, sink));
  while (engine->pending() > 0) PULSE_RETURN_IF_ERROR(engine->Step().status());
  PULSE_ASSIGN_OR_RETURN(const RequestSnapshot result, engine->Snapshot(id));
  PULSE_RETURN_IF_ERROR(result.error);

  if (!args.logits_path.empty()) PULSE_RETURN_IF_ERROR(WriteLogits(args.logits_path, logits));
  if (args.greedy > 0) std::printf("%s\n", absl::StrJoin(result.tokens, ",").c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-dump-logits", pulse::kUsage, pulse::ParseArgs(argc, argv),
                        &pulse::Run);
}
