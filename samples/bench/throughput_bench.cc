// pulseinfer-throughput: decode throughput at equal KV memory, through the public C ABI, as JSON
// Lines.
//
//   pulseinfer-throughput --model PATH [--random-weights] [--backend auto|cpu|cuda]
//       [--kv-mib 16384,32768] [--contexts 16384,32768] [--concurrency 4,8,16,32]
//       [--modes dense,offload-headwise,pulse,pulse-offload-every,pulse-headwise,pulse-per-chunk,
//        pulse-no-interrupt]
//       [--picks scores,synthetic:0.85] [--budget 2048] [--decode-steps 16] [--micro-batches 0,2]
//       [--host-codecs raw,fp8] [--prefill-chunk 8192] [--block-tokens 4] [--sink 4]
//       [--window 16] [--device NAME] [--commit SHA] [--out FILE.jsonl]
//
// For each KV cap, context, concurrency N and mode, one engine whose KV may use the cap in all
// (pulse_engine_params.kv_memory_bytes: the KV cache, the offload slots and the summaries) takes
// N requests of CONTEXT random tokens at once, each generating greedily past the measurement.
// What does not fit waits, as it would in a server. Once every running request decodes, the
// decode-only steps are timed (the first two are warm-up; a step that prefills a newly admitted
// request, or that decodes some requests while another prefills, is not timed): output tokens/s
// is the tokens they generated over their time, TPOT the median and 99th percentile of their
// times. Prefill is not part of the figure.
//
// Modes: dense (offloading off: the batch the cap allows); offload-headwise, the baseline of
// head-wise offloading systems (head-wise selection, a copy a chunk, every request offloaded,
// each layer's recall waited for in the layer); pulse (SoloHead, the gather engine, adaptive
// admission, adaptive micro-batches: the library's defaults); and one ablation each:
// pulse-offload-every (no admission), pulse-headwise (head-wise selection), pulse-per-chunk (a
// copy a chunk instead of the gather engine), pulse-no-interrupt (one micro-batch a step: each
// layer's recall exposed). An offloaded engine gives each
// of the N requests a budget's slots and a host tier for its context; a cap those leave no KV
// cache in is recorded as {"fits": false} with the library's message. --picks: how offloaded
// steps pick, by the summaries' scores, or drawn at a stated step-to-step reuse
// (pulse_engine_params.offload_synthetic_reuse: random weights pick almost anew each step, a
// trained model keeps 82-92% of its picks); every record says which ("picks") and the reuse the
// timed steps measured ("reuse"). Dense runs once a grid point, with "picks": "dense".
// --micro-batches: the settings the modes that choose (all but dense, offload-headwise and
// pulse-no-interrupt) run with, each a point: 0 the adaptive choice (the default), N every
// decode step as N micro-batches; each record says which ("micro_batch_setting", null where
// the mode fixes it). --host-codecs: the host tier's forms the offloaded modes run with, each a
// point: raw (the default: the device's blocks) or fp8 (half a bf16 block: a host tier of the
// same size holds twice the requests); each record says which ("codec": fp8, or the device's
// bf16 or f32, dense's too).
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
using pulse_bench::LiveTable;
using pulse_bench::ModelFacts;
using pulse_bench::Number;
using pulse_bench::Percentile;
using pulse_bench::Records;
using pulse_bench::RoundUp;

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kModes = {
    "dense",           "offload-headwise",  "pulse", "pulse-offload-every", "pulse-headwise",
    "pulse-per-chunk", "pulse-no-interrupt"};

// The offload_synthetic_reuse of a --picks item: 0 for "scores" (and "dense"), R for
// "synthetic:R" with R in (0, 1); Fail otherwise.
double SyntheticReuse(const std::string& picks) {
  if (picks == "scores" || picks == "dense") return 0.0;
  const std::string prefix = "synthetic:";
  if (picks.rfind(prefix, 0) == 0) {
    char* end = nullptr;
    const double reuse = std::strtod(picks.c_str() + prefix.size(), &end);
    if (*end == '\0' && reuse > 0.0 && reuse < 1.0) return reuse;
  }
  Fail("--picks expects scores or synthetic:R with R in (0, 1), got '" + picks + "'");
}

struct Args {
  std::string model;
  bool random_weights = false;
  std::string backend = "auto";
  std::vector<int32_t> kv_mib = {16384, 32768};
  std::vector<int32_t> contexts = {16384, 32768};
  std::vector<int32_t> concurrency = {4, 8, 16, 32};
  std::vector<std::string> modes = kModes;
  std::vector<std::string> picks = {"scores"};
  int32_t budget = 2048;
  int32_t decode_steps = 16;
  std::vector<int32_t> micro_batches = {0};  // 0: the adaptive choice
  std::vector<int32_t> host_codecs = {PULSE_HOST_CODEC_RAW};
  int32_t prefill_chunk = 8192;
  int32_t block_tokens = 0;  // 0: the library's choice (EngineBlockTokens)
  // < 0 (as parsed): the library's default
  int32_t sink = -1;
  int32_t window = -1;
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
    if (flag == "--model") {
      args.model = value;
    } else if (flag == "--backend") {
      args.backend = value;
    } else if (flag == "--kv-mib") {
      args.kv_mib = pulse_bench::ParsePositiveList(flag, value);
    } else if (flag == "--contexts") {
      args.contexts = pulse_bench::ParsePositiveList(flag, value);
    } else if (flag == "--concurrency") {
      args.concurrency = pulse_bench::ParsePositiveList(flag, value);
    } else if (flag == "--modes") {
      args.modes = pulse_bench::SplitList(value);
      for (const std::string& mode : args.modes) {
        bool known = false;
        for (const std::string& name : kModes) known = known || mode == name;
        if (!known) Fail("unknown mode '" + mode + "'");
      }
    } else if (flag == "--picks") {
      args.picks = pulse_bench::SplitList(value);
      for (const std::string& picks : args.picks) SyntheticReuse(picks);
    } else if (flag == "--budget") {
      args.budget = pulse_bench::ParsePositiveList(flag, value).at(0);
    } else if (flag == "--decode-steps") {
      args.decode_steps = pulse_bench::ParsePositiveList(flag, value).at(0);
    } else if (flag == "--micro-batches") {
      args.micro_batches = pulse_bench::ParseMicroBatches(flag, value);
    } else if (flag == "--host-codecs") {
      args.host_codecs = pulse_bench::ParseHostCodecs(flag, value);
    } else if (flag == "--prefill-chunk") {
      args.prefill_chunk = pulse_bench::ParsePositiveList(flag, value).at(0);
    } else if (flag == "--block-tokens") {
      args.block_tokens = pulse_bench::ParsePositiveList(flag, value).at(0);
    } else if (flag == "--sink") {
      args.sink = std::atoi(value.c_str());
    } else if (flag == "--window") {
      args.window = std::atoi(value.c_str());
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
  pulse_engine_params defaults;
  Check(pulse_engine_params_init(&defaults, sizeof(defaults)), "pulse_engine_params_init");
  if (args.sink < 0) args.sink = defaults.offload_sink_tokens;
  if (args.window < 0) args.window = defaults.offload_window_tokens;
  return args;
}

// One point of the grid.
struct Point {
  int64_t kv_bytes = 0;
  int32_t context = 0;
  int32_t concurrency = 0;
  std::string mode;
  std::string picks;                          // "dense", "scores" or "synthetic:R"
  int32_t micro_batches = 0;                  // pulse_engine_params.micro_batches
  int32_t host_codec = PULSE_HOST_CODEC_RAW;  // pulse_engine_params.offload_host_codec
};

// Whether `mode` leaves the micro-batches to --micro-batches (the others run one a step).
bool ChoosesMicroBatches(const std::string& mode) {
  return mode != "dense" && mode != "offload-headwise" && mode != "pulse-no-interrupt";
}

// The engine of `point`, or null (with `error` set) when its cap leaves no room.
pulse_engine* CreateEngine(pulse_model* model, const Args& args, const Point& point,
                           int32_t max_tokens, std::string& error) {
  pulse_engine_params params;
  Check(pulse_engine_params_init(&params, sizeof(params)), "pulse_engine_params_init");
  params.max_batch = point.concurrency;
  params.prefill_chunk = args.prefill_chunk;
  params.max_step_tokens = args.prefill_chunk + point.concurrency;
  params.max_context = point.context + max_tokens;
  params.kv_memory_bytes = point.kv_bytes;
  params.block_tokens = args.block_tokens;
  if (point.mode != "dense") {
    params.offload_sink_tokens = args.sink;
    params.offload_window_tokens = args.window;
    const bool headwise = point.mode == "offload-headwise" || point.mode == "pulse-headwise";
    params.offload_mode = headwise ? PULSE_OFFLOAD_HEADWISE : PULSE_OFFLOAD_SOLOHEAD;
    params.offload_budget_tokens = args.budget;
    params.offload_synthetic_reuse = SyntheticReuse(point.picks);
    params.offload_executor = point.mode == "offload-headwise" || point.mode == "pulse-per-chunk"
                                  ? PULSE_COPY_PER_CHUNK
                                  : PULSE_COPY_AUTO;
    params.offload_admission =
        point.mode == "offload-headwise" || point.mode == "pulse-offload-every"
            ? PULSE_ADMIT_OFFLOAD_EVERY
            : PULSE_ADMIT_IO_ADAPTIVE;
    params.micro_batches = point.micro_batches;
    params.offload_host_codec = point.host_codec;
    const int32_t block = pulse_bench::EngineBlockTokens(args.block_tokens, true);
    params.offload_slot_tokens = int64_t{point.concurrency} * RoundUp(args.budget, block);
    params.offload_host_tokens =
        int64_t{point.concurrency} * RoundUp(point.context + max_tokens, block);
  }
  pulse_engine* engine = nullptr;
  const pulse_status status = pulse_engine_create(model, &params, &engine);
  if (status == PULSE_NO_CAPACITY || status == PULSE_OUT_OF_MEMORY) {
    error = pulse_last_error();
    return nullptr;
  }
  Check(status, "pulse_engine_create");
  return engine;
}

void Run(pulse_model* model, const ModelFacts& facts, const Args& args, const Point& point,
         Records& records, LiveTable& table) {
  // Enough tokens for every request to decode through every admitted prompt's prefill (a chunk
  // a step, one prompt after another; a staged prompt's chunk alternates with a step decoding the
  // others, hence twice the chunks) and the timed steps.
  const int32_t prefill_steps =
      2 * ((point.context + args.prefill_chunk - 1) / args.prefill_chunk + 2);
  const int32_t max_tokens = point.concurrency * prefill_steps + args.decode_steps + 8;
  const std::string codec = pulse_bench::CodecName(point.host_codec, facts.info.backend);
  const std::string fields =
      "\"model\": " + JsonString(facts.name) + ", \"backend\": " + JsonString(facts.info.backend) +
      ", \"mode\": " + JsonString(point.mode) +
      ", \"kv_mib\": " + Number(static_cast<double>(point.kv_bytes) / (1 << 20)) +
      ", \"context\": " + std::to_string(point.context) +
      ", \"concurrency\": " + std::to_string(point.concurrency) +
      ", \"budget\": " + (point.mode == "dense" ? "null" : std::to_string(args.budget)) +
      ", \"block_tokens\": " +
      std::to_string(pulse_bench::EngineBlockTokens(args.block_tokens, point.mode != "dense")) +
      ", \"sink\": " + std::to_string(args.sink) + ", \"window\": " + std::to_string(args.window) +
      ", \"codec\": " + JsonString(codec) + ", \"picks\": " + JsonString(point.picks) +
      ", \"micro_batch_setting\": " +
      (ChoosesMicroBatches(point.mode) ? std::to_string(point.micro_batches) : "null");
  std::string error;
  pulse_engine* engine = CreateEngine(model, args, point, max_tokens, error);
  if (engine == nullptr) {
    records.Write("throughput", fields + ", \"fits\": false, \"error\": " + JsonString(error));
    table.Row({point.mode, point.picks, codec, std::to_string(point.kv_bytes >> 20),
               std::to_string(point.context), std::to_string(point.concurrency), "does not fit"});
    return;
  }
  const pulse_sampling_params sampling = pulse_bench::Greedy(max_tokens);
  for (int32_t r = 0; r < point.concurrency; ++r) {
    const std::vector<int32_t> prompt =
        pulse_bench::RandomPrompt(point.context, facts.info.vocab_size, r + 1);
    uint64_t id = 0;
    const pulse_status status = pulse_request_submit(engine, prompt.data(), prompt.size(),
                                                     &sampling, nullptr, nullptr, &id);
    if (status == PULSE_OUT_OF_MEMORY) {  // one request alone exceeds the cap
      records.Write("throughput",
                    fields + ", \"fits\": false, \"error\": " + JsonString(pulse_last_error()));
      table.Row({point.mode, point.picks, codec, std::to_string(point.kv_bytes >> 20),
                 std::to_string(point.context), std::to_string(point.concurrency), "does not fit"});
      pulse_engine_free(engine);
      return;
    }
    Check(status, "pulse_request_submit");
  }
  std::vector<double> step_ms;
  int64_t tokens = 0;
  double seconds = 0;
  int32_t decode_only = 0;
  pulse_engine_stats first{};
  pulse_engine_stats state{};
  std::vector<double> running;
  while (static_cast<int32_t>(step_ms.size()) < args.decode_steps) {
    pulse_step_report report;
    report.struct_size = sizeof(report);
    const pulse_engine_stats before = EngineStats(engine);
    const Clock::time_point start = Clock::now();
    Check(pulse_engine_step(engine, &report), "pulse_engine_step");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    state = EngineStats(engine);
    if (state.finished_requests > 0) {
      Fail("a request ended before the timed steps did (" + point.mode + ", concurrency " +
           std::to_string(point.concurrency) + ")");
    }
    // Timed once every running request decodes: a staged prompt's chunk runs in a step of its
    // own, between steps that decode the others.
    if (report.prefill_tokens != 0 || report.decode_tokens == 0 ||
        report.decode_tokens != state.running) {
      continue;
    }
    if (++decode_only <= 2) continue;  // warm-up
    if (step_ms.empty()) first = before;
    step_ms.push_back(ms);
    tokens += report.decode_tokens;
    seconds += ms / 1e3;
    running.push_back(report.decode_tokens);
  }
  const double recall_bytes = static_cast<double>(state.recall_bytes - first.recall_bytes);
  const double recall_ms = state.recall_ms - first.recall_ms;
  const int64_t lookups =
      (state.slot_hits - first.slot_hits) + (state.slot_misses - first.slot_misses);
  const double steps = static_cast<double>(step_ms.size());
  const double tokens_per_s = static_cast<double>(tokens) / seconds;
  records.Write(
      "throughput",
      fields + ", \"fits\": true, \"tokens_per_s\": " + Number(tokens_per_s) +
          ", \"tpot_ms_p50\": " + Number(Percentile(step_ms, 0.5)) + ", \"tpot_ms_p99\": " +
          Number(Percentile(step_ms, 0.99)) + ", \"running\": " + Number(Percentile(running, 0.5)) +
          ", \"running_offloaded\": " + std::to_string(state.running_offloaded) +
          ", \"waiting\": " + std::to_string(state.queued) +
          ", \"admitted_resident\": " + std::to_string(state.admitted_resident) +
          ", \"admitted_offloaded\": " + std::to_string(state.admitted_offloaded) +
          ", \"admission_io_waits\": " + std::to_string(state.admission_io_waits) +
          ", \"staged_requests\": " + std::to_string(state.staged_requests) +
          ", \"predicted_recall_ms\": " + Number(state.predicted_recall_ms) +
          ", \"step_compute_ms\": " + Number(state.step_compute_ms) +
          ", \"plan_ms\": " + Number((state.selection_ms - first.selection_ms) / steps) +
          ", \"recall_bytes_per_step\": " + Number(recall_bytes / steps) + ", \"recall_gb_s\": " +
          (recall_ms > 0 ? Number(recall_bytes / recall_ms / 1e6) : std::string("null")) +
          ", \"reuse\": " +
          (state.sparse_picked_blocks > first.sparse_picked_blocks
               ? Number(
                     static_cast<double>(state.sparse_reused_blocks - first.sparse_reused_blocks) /
                     static_cast<double>(state.sparse_picked_blocks - first.sparse_picked_blocks))
               : std::string("null")) +
          ", \"cache_hit_rate\": " +
          (lookups > 0 ? Number(static_cast<double>(state.slot_hits - first.slot_hits) /
                                static_cast<double>(lookups))
                       : std::string("null")) +
          ", \"kv_memory_bytes\": " + std::to_string(state.kv_memory_bytes) +
          ", \"kv_blocks\": " + std::to_string(state.kv_blocks) +
          ", \"micro_batches\": " + std::to_string(state.micro_batches) +
          ", \"split_steps\": " + std::to_string(state.split_steps - first.split_steps) +
          ", \"probe_steps\": " + std::to_string(state.probe_steps - first.probe_steps) +
          ", \"retried_steps\": " + std::to_string(state.retried_steps - first.retried_steps) +
          ", \"timed_steps\": " + std::to_string(step_ms.size()));
  table.Row({point.mode, point.picks, codec, std::to_string(point.kv_bytes >> 20),
             std::to_string(point.context), std::to_string(point.concurrency),
             pulse_bench::Fixed(tokens_per_s, 1), pulse_bench::Fixed(Percentile(step_ms, 0.5), 2),
             Number(Percentile(running, 0.5)), std::to_string(state.running_offloaded),
             std::to_string(state.queued)});
  pulse_engine_free(engine);
}

}  // namespace

int main(int argc, char** argv) {
  pulse_bench::SetProgramName("pulseinfer-throughput");
  const Args args = ParseArgs(argc, argv);
  pulse_model* model = pulse_bench::LoadModel(args.model, args.backend, args.random_weights);
  const ModelFacts facts = pulse_bench::Describe(model, args.model);
  Records records(args.out, args.device, args.commit, args.command);
  LiveTable table({"mode", "picks", "codec", "KV MiB", "context", "requests", "tokens/s", "TPOT ms",
                   "running", "offloaded", "waiting"});
  for (const int32_t mib : args.kv_mib) {
    for (const int32_t context : args.contexts) {
      for (const int32_t concurrency : args.concurrency) {
        for (const std::string& mode : args.modes) {
          for (const std::string& picks :
               mode == "dense" ? std::vector<std::string>{"dense"} : args.picks) {
            for (const int32_t micro_batches :
                 ChoosesMicroBatches(mode) ? args.micro_batches : std::vector<int32_t>{1}) {
              for (const int32_t codec : mode == "dense"
                                             ? std::vector<int32_t>{PULSE_HOST_CODEC_RAW}
                                             : args.host_codecs) {
                Run(model, facts, args,
                    {.kv_bytes = int64_t{mib} << 20,
                     .context = context,
                     .concurrency = concurrency,
                     .mode = mode,
                     .picks = picks,
                     .micro_batches = micro_batches,
                     .host_codec = codec},
                    records, table);
              }
            }
          }
        }
      }
    }
  }
  pulse_model_free(model);
  return 0;
}
