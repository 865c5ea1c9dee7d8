// pulse-engine-bench: prefill and decode throughput of the Engine on one model.
//
//   pulse-engine-bench --model PATH [--weight-type f32|bf16] [--prompt 512] [--decode 32]
//       [--batches 1,8] [--threads 0]
//
// Prefill: one request's prompt tokens per second (the whole prompt in one step). Decode: at
// each batch size B, B requests with the same prompt length are prefilled first, then `decode`
// steps of B new tokens each are timed: B * decode / seconds, and the mean step time.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/model/model.h"
#include "core/model/tensor_source.h"
#include "core/sched/engine.h"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kUsage =
    "usage: pulse-engine-bench --model PATH [--weight-type f32|bf16] [--prompt 512] "
    "[--decode 32] [--batches 1,8] [--threads 0]";

struct Args {
  std::string model;
  DType weight_type = DType::kBF16;
  int32_t prompt = 512;
  int32_t decode = 32;
  std::vector<int32_t> batches = {1, 8};
  int32_t threads = 0;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; i += 2) {
    const absl::string_view flag = argv[i];
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    const absl::string_view value = argv[i + 1];
    bool ok = true;
    if (flag == "--model") {
      args.model = std::string(value);
    } else if (flag == "--weight-type") {
      ok = value == "f32" || value == "bf16";
      args.weight_type = value == "f32" ? DType::kF32 : DType::kBF16;
    } else if (flag == "--prompt") {
      ok = absl::SimpleAtoi(value, &args.prompt) && args.prompt >= 1;
    } else if (flag == "--decode") {
      ok = absl::SimpleAtoi(value, &args.decode) && args.decode >= 1;
    } else if (flag == "--threads") {
      ok = absl::SimpleAtoi(value, &args.threads) && args.threads >= 0;
    } else if (flag == "--batches") {
      args.batches.clear();
      for (const absl::string_view b : absl::StrSplit(value, ',')) {
        int32_t batch = 0;
        ok = ok && absl::SimpleAtoi(b, &batch) && batch >= 1;
        args.batches.push_back(batch);
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrFormat("bad value for %s: '%s'", flag, value));
    }
  }
  if (args.model.empty()) return absl::InvalidArgumentError("--model is required");
  return args;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::vector<int32_t> BenchPrompt(int32_t length, int32_t vocab) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < length; ++i) prompt.push_back((i * 7919 + 13) % vocab);
  return prompt;
}

// Tokens a decode-benchmark request may generate: the timed steps, plus what it generates while
// the later prompts prefill (at most two steps per prompt: the step budget is one prompt), plus
// the untimed pure decode step.
int32_t DecodeMaxTokens(const Args& args, int32_t batch) { return args.decode + 2 * batch + 1; }

absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(std::shared_ptr<const Model> model,
                                                   const Args& args, int32_t batch) {
  EngineOptions options;
  options.max_batch = batch;
  options.prefill_chunk = args.prompt;
  options.max_step_tokens = std::max(args.prompt, batch);
  options.max_context = args.prompt + DecodeMaxTokens(args, batch) + 1;
  // Whole blocks per request, so that all `batch` requests fit at once.
  const int64_t blocks = (options.max_context + options.block_tokens - 1) / options.block_tokens;
  options.kv_capacity_tokens = batch * blocks * options.block_tokens;
  return Engine::Create(std::move(model), options);
}

SamplingParams BenchSampling(int32_t max_tokens) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  return params;
}

// Seconds of the step that prefills one whole prompt.
absl::StatusOr<double> PrefillSeconds(std::shared_ptr<const Model> model, const Args& args) {
  PULSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, MakeEngine(model, args, 1));
  const std::vector<int32_t> prompt = BenchPrompt(args.prompt, model->config().vocab_size);
  PULSE_RETURN_IF_ERROR(engine->Submit(prompt, BenchSampling(1), nullptr).status());
  const Clock::time_point start = Clock::now();
  PULSE_RETURN_IF_ERROR(engine->Step().status());
  return Seconds(Clock::now() - start);
}

// Seconds of `args.decode` steps of `batch` decoding requests.
absl::StatusOr<double> DecodeSeconds(std::shared_ptr<const Model> model, const Args& args,
                                     int32_t batch) {
  PULSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, MakeEngine(model, args, batch));
  const std::vector<int32_t> prompt = BenchPrompt(args.prompt, model->config().vocab_size);
  const int32_t max_tokens = DecodeMaxTokens(args, batch);
  for (int32_t i = 0; i < batch; ++i) {
    PULSE_RETURN_IF_ERROR(engine->Submit(prompt, BenchSampling(max_tokens), nullptr).status());
  }
  // Until a step is pure decode: every prompt is in.
  for (StepReport report; report.prefill_tokens > 0 || report.decode_tokens < batch;) {
    PULSE_ASSIGN_OR_RETURN(report, engine->Step());
    if (report.scheduled == 0) return absl::InternalError("the requests do not all fit");
  }
  const Clock::time_point start = Clock::now();
  for (int32_t step = 0; step < args.decode; ++step) {
    PULSE_ASSIGN_OR_RETURN(const StepReport report, engine->Step());
    if (report.decode_tokens != batch) {
      return absl::InternalError(absl::StrFormat("decode step %d ran %d tokens, not %d", step,
                                                 report.decode_tokens, batch));
    }
  }
  return Seconds(Clock::now() - start);
}

absl::Status Run(const Args& args) {
  PULSE_ASSIGN_OR_RETURN(const std::unique_ptr<TensorSource> source, OpenTensorSource(args.model));
  PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> backend,
                         CreateCpuBackend({.threads = args.threads, .memory_limit_bytes = 0}));
  PULSE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model,
                         Model::Load(std::move(backend), *source, {args.weight_type}));
  std::printf("model %s, %s weights, prompt %d tokens, %d decode steps\n", args.model.c_str(),
              std::string(DTypeName(args.weight_type)).c_str(), args.prompt, args.decode);
  std::printf("%-8s %6s %12s %12s\n", "phase", "batch", "tokens/s", "ms/step");
  std::fflush(stdout);
  PULSE_ASSIGN_OR_RETURN(const double prefill, PrefillSeconds(model, args));
  std::printf("%-8s %6d %12.1f %12.1f\n", "prefill", 1, args.prompt / prefill, prefill * 1e3);
  for (const int32_t batch : args.batches) {
    PULSE_ASSIGN_OR_RETURN(const double decode, DecodeSeconds(model, args, batch));
    std::printf("%-8s %6d %12.1f %12.1f\n", "decode", batch,
                static_cast<double>(batch) * args.decode / decode, decode * 1e3 / args.decode);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-engine-bench", pulse::kUsage, pulse::ParseArgs(argc, argv),
                        &pulse::Run);
}
