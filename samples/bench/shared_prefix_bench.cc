// pulseinfer-shared-prefix: many requests over one document, with and without the host tier's
// prefix cache (pulse_engine_params.offload_prefix_cache), through the public C ABI, as JSON
// Lines ("bench": "shared-prefix").
//
//   pulseinfer-shared-prefix --model PATH [--random-weights] [--backend auto|cpu|cuda]
//       [--document 32768] [--question 256] [--requests 1,8,64] [--prefix-cache on,off]
//       [--budget 2048] [--decode-steps 16] [--prefill-chunk 8192] [--host-codec raw|fp8]
//       [--device NAME] [--commit SHA] [--out FILE.jsonl]
//
// For each N of --requests and each --prefix-cache setting, one engine with every request
// offloaded (SoloHead at --budget): a first request, the document (random tokens) and a question
// of its own (--question random tokens), runs until it has decoded a step, which caches its
// prompt's blocks when the cache is on; then the N - 1 others come at once, each the same
// document and a question of its own. Each request generates greedily past the measurement.
// The record has the first request's time to first token (its whole prompt prefilled), the
// others' (least, median and largest: with the cache, their questions prefilled from the host
// tier's copy of the document in staged steps, as many a step as its tokens hold), the output
// tokens/s and TPOT of the decode-only steps once all N decode (after two warm-up steps), the
// host-tier memory the requests hold at that point (host_blocks_in_use; with the cache the document
// counts once) and the prefix cache's counts. Without the cache the host tier must hold N
// documents, so N is bounded by the host's memory.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "pulseinfer/pulseinfer.h"

namespace {

using pulse_bench::Check;
using pulse_bench::EngineStats;
using pulse_bench::Fail;
using pulse_bench::JsonString;
using pulse_bench::Number;
using pulse_bench::Percentile;
using pulse_bench::RandomPrompt;
using pulse_bench::RoundUp;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model;
  bool random_weights = false;
  std::string backend = "auto";
  int32_t document = 32768;
  int32_t question = 256;
  std::vector<int32_t> requests = {1, 8, 64};
  std::vector<bool> prefix_cache = {true, false};
  int32_t budget = 2048;
  int32_t decode_steps = 16;
  int32_t prefill_chunk = 8192;
  std::string host_codec = "raw";
  std::string device = "unknown";
  std::string commit = "unknown";
  std::string out;
  std::string command;
};

Args ParseArgs(int argc, char** argv) {
  Args args;
  args.command = pulse_bench::CommandLine(argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--random-weights") {
      args.random_weights = true;
      continue;
    }
    if (i + 1 >= argc) Fail(flag + " needs a value");
    const std::string value = argv[++i];
    const auto positive = [&] { return pulse_bench::ParsePositiveList(flag, value).at(0); };
    if (flag == "--model") {
      args.model = value;
    } else if (flag == "--backend") {
      args.backend = value;
    } else if (flag == "--document") {
      args.document = positive();
    } else if (flag == "--question") {
      args.question = positive();
    } else if (flag == "--requests") {
      args.requests = pulse_bench::ParsePositiveList(flag, value);
    } else if (flag == "--prefix-cache") {
      args.prefix_cache.clear();
      for (const std::string& setting : pulse_bench::SplitList(value)) {
        if (setting != "on" && setting != "off") Fail(flag + " expects on and/or off");
        args.prefix_cache.push_back(setting == "on");
      }
    } else if (flag == "--budget") {
      args.budget = positive();
    } else if (flag == "--decode-steps") {
      args.decode_steps = positive();
    } else if (flag == "--prefill-chunk") {
      args.prefill_chunk = positive();
    } else if (flag == "--host-codec") {
      pulse_bench::ParseHostCodecs(flag, value);  // Fails unless raw or fp8
      args.host_codec = value;
    } else if (flag == "--device") {
      args.device = value;
    } else if (flag == "--commit") {
      args.commit = value;
    } else if (flag == "--out") {
      args.out = value;
    } else {
      Fail("unknown flag " + flag);
    }
  }
  if (args.model.empty()) Fail("--model is required");
  return args;
}

// The document, then a question of the request's own.
std::vector<int32_t> Prompt(const std::vector<int32_t>& document, int32_t question, int32_t vocab,
                            int32_t request) {
  std::vector<int32_t> prompt = document;
  const std::vector<int32_t> own = RandomPrompt(question, vocab, 1000 + request);
  prompt.insert(prompt.end(), own.begin(), own.end());
  return prompt;
}

pulse_request_stats RequestStats(pulse_engine* engine, uint64_t id) {
  pulse_request_stats stats;
  stats.struct_size = sizeof(stats);
  Check(pulse_request_stats_get(engine, id, &stats), "pulse_request_stats_get");
  return stats;
}

void Run(pulse_model* model, const pulse_bench::ModelFacts& facts, const Args& args,
         int32_t requests, bool cache, pulse_bench::Records& records,
         pulse_bench::LiveTable& table) {
  pulse_engine_params params;
  Check(pulse_engine_params_init(&params, sizeof(params)), "pulse_engine_params_init");
  const int32_t block = pulse_bench::EngineBlockTokens(params.block_tokens, true);
  const int32_t prompt_tokens = args.document + args.question;
  // Enough tokens for every request to decode through the others' prefill (staged steps every
  // other step, at worst one request's chunk in each; without the cache, every request's whole
  // prompt) and the timed steps.
  const int32_t chunks = (prompt_tokens + args.prefill_chunk - 1) / args.prefill_chunk + 2;
  const int32_t max_tokens = 2 * requests * chunks + args.decode_steps + 16;
  const int64_t request_tokens = RoundUp(prompt_tokens + max_tokens, block);
  const int64_t own_tokens = RoundUp(args.question + max_tokens, block) + block;
  params.max_batch = requests;
  params.prefill_chunk = args.prefill_chunk;
  params.max_step_tokens = args.prefill_chunk + requests;
  params.max_context = prompt_tokens + max_tokens;
  // One prompt prefilled resident, and every request's sinks, window and block written.
  params.kv_capacity_tokens = RoundUp(prompt_tokens, block) + int64_t{requests} * 8 * block;
  params.offload_mode = PULSE_OFFLOAD_SOLOHEAD;
  params.offload_budget_tokens = args.budget;
  params.offload_admission = PULSE_ADMIT_OFFLOAD_EVERY;
  params.offload_prefix_cache = cache ? 1 : 0;
  params.offload_host_codec =
      args.host_codec == "fp8" ? PULSE_HOST_CODEC_FP8 : PULSE_HOST_CODEC_RAW;
  // With the cache the document is held once.
  params.offload_host_tokens =
      cache ? request_tokens + (requests - 1) * own_tokens : requests * request_tokens;
  params.offload_slot_tokens = int64_t{requests} * RoundUp(args.budget, block);
  const std::string fields =
      "\"model\": " + JsonString(facts.name) + ", \"backend\": " + JsonString(facts.info.backend) +
      ", \"codec\": " +
      JsonString(pulse_bench::CodecName(params.offload_host_codec, facts.info.backend)) +
      ", \"prefix_cache\": " + (cache ? "true" : "false") +
      ", \"document\": " + std::to_string(args.document) +
      ", \"question\": " + std::to_string(args.question) +
      ", \"requests\": " + std::to_string(requests) +
      ", \"budget\": " + std::to_string(args.budget) +
      ", \"block_tokens\": " + std::to_string(block);
  pulse_engine* engine = nullptr;
  const pulse_status created = pulse_engine_create(model, &params, &engine);
  if (created == PULSE_NO_CAPACITY || created == PULSE_OUT_OF_MEMORY) {
    records.Write("shared-prefix",
                  fields + ", \"fits\": false, \"error\": " + JsonString(pulse_last_error()));
    table.Row({cache ? "on" : "off", std::to_string(requests), "does not fit"});
    return;
  }
  Check(created, "pulse_engine_create");
  const std::vector<int32_t> document =
      RandomPrompt(args.document, facts.info.vocab_size, /*seed=*/7);
  const pulse_sampling_params sampling = pulse_bench::Greedy(max_tokens);
  std::vector<uint64_t> ids;
  const auto submit = [&](int32_t request) {
    const std::vector<int32_t> prompt =
        Prompt(document, args.question, facts.info.vocab_size, request);
    uint64_t id = 0;
    Check(pulse_request_submit(engine, prompt.data(), prompt.size(), &sampling, nullptr, nullptr,
                               &id),
          "pulse_request_submit");
    ids.push_back(id);
  };
  const auto step = [&] {
    pulse_step_report report;
    report.struct_size = sizeof(report);
    Check(pulse_engine_step(engine, &report), "pulse_engine_step");
    if (EngineStats(engine).finished_requests > 0) {
      Fail("a request ended before the measurement did (" + std::to_string(requests) +
           " requests)");
    }
    return report;
  };
  submit(0);
  while (RequestStats(engine, ids[0]).generated_tokens < 2) step();
  for (int32_t r = 1; r < requests; ++r) submit(r);
  std::vector<double> step_ms;
  int64_t tokens = 0;
  double seconds = 0;
  int32_t decode_only = 0;
  pulse_engine_stats held{};
  // Every request decodes once each prompt is in: the others before it within max_tokens steps.
  for (int32_t steps = 0; static_cast<int32_t>(step_ms.size()) < args.decode_steps; ++steps) {
    if (steps > max_tokens) {
      Fail("not every request ran at once: " + std::to_string(EngineStats(engine).running) +
           " of " + std::to_string(requests) + " after " + std::to_string(steps) + " steps");
    }
    const Clock::time_point start = Clock::now();
    const pulse_step_report report = step();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (report.prefill_tokens != 0 || report.decode_tokens != requests) continue;
    if (++decode_only <= 2) continue;  // warm-up
    if (step_ms.empty()) held = EngineStats(engine);
    step_ms.push_back(ms);
    tokens += report.decode_tokens;
    seconds += ms / 1e3;
  }
  const pulse_engine_stats after = EngineStats(engine);
  std::vector<double> others_ttft;
  for (size_t r = 1; r < ids.size(); ++r) {
    others_ttft.push_back(RequestStats(engine, ids[r]).ttft_ms);
  }
  const double first_ttft = RequestStats(engine, ids[0]).ttft_ms;
  pulse_engine_free(engine);
  // The host tier's form: the device's bytes, or fp8's byte a value and a scale per head's
  // keys or values (facts count the device's bf16 or f32).
  const double host_bytes_per_block =
      args.host_codec == "fp8"
          ? facts.kv_bytes_per_token * block / (facts.info.backend == std::string("cuda") ? 2 : 4) +
                2.0 * facts.info.num_kv_heads * 4 * facts.info.num_layers
          : facts.kv_bytes_per_token * block;
  const double host_gib =
      held.host_blocks_in_use * host_bytes_per_block / static_cast<double>(1 << 30);
  const double others_p50 = others_ttft.empty() ? 0 : Percentile(others_ttft, 0.5);
  const double others_min =
      others_ttft.empty() ? 0 : *std::min_element(others_ttft.begin(), others_ttft.end());
  const double others_max =
      others_ttft.empty() ? 0 : *std::max_element(others_ttft.begin(), others_ttft.end());
  records.Write(
      "shared-prefix",
      fields + ", \"fits\": true, \"ttft_first_ms\": " + Number(first_ttft) +
          ", \"ttft_others_ms_min\": " + (others_ttft.empty() ? "null" : Number(others_min)) +
          ", \"ttft_others_ms_p50\": " + (others_ttft.empty() ? "null" : Number(others_p50)) +
          ", \"ttft_others_ms_max\": " + (others_ttft.empty() ? "null" : Number(others_max)) +
          ", \"tokens_per_s\": " + Number(static_cast<double>(tokens) / seconds) +
          ", \"tpot_ms_p50\": " + Number(Percentile(step_ms, 0.5)) + ", \"host_blocks_in_use\": " +
          std::to_string(held.host_blocks_in_use) + ", \"host_gib_in_use\": " + Number(host_gib) +
          ", \"host_blocks_cached\": " + std::to_string(after.host_blocks_cached) +
          ", \"prefix_hits\": " + std::to_string(after.prefix_hits) +
          ", \"prefix_hit_tokens\": " + std::to_string(after.prefix_hit_tokens) +
          ", \"prefill_tokens\": " + std::to_string(after.prefill_tokens) +
          ", \"recall_bytes_per_step\": " +
          Number(static_cast<double>(after.recall_bytes - held.recall_bytes) /
                 static_cast<double>(step_ms.size())) +
          ", \"timed_steps\": " + std::to_string(step_ms.size()));
  table.Row({cache ? "on" : "off", std::to_string(requests), pulse_bench::Fixed(first_ttft, 1),
             others_ttft.empty() ? "-" : pulse_bench::Fixed(others_p50, 1),
             pulse_bench::Fixed(static_cast<double>(tokens) / seconds, 1),
             pulse_bench::Fixed(Percentile(step_ms, 0.5), 2), pulse_bench::Fixed(host_gib, 2),
             std::to_string(after.prefix_hits)});
}

}  // namespace

int main(int argc, char** argv) {
  pulse_bench::SetProgramName("pulseinfer-shared-prefix");
  const Args args = ParseArgs(argc, argv);
  pulse_model* model = pulse_bench::LoadModel(args.model, args.backend, args.random_weights);
  const pulse_bench::ModelFacts facts = pulse_bench::Describe(model, args.model);
  pulse_bench::Records records(args.out, args.device, args.commit, args.command);
  pulse_bench::LiveTable table({"cache", "requests", "TTFT first ms", "TTFT others p50 ms",
                                "tokens/s", "TPOT ms", "host GiB", "hits"});
  for (const int32_t requests : args.requests) {
    for (const bool cache : args.prefix_cache) {
      Run(model, facts, args, requests, cache, records, table);
    }
  }
  pulse_model_free(model);
  return 0;
}
