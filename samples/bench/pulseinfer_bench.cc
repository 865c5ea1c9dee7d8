// pulseinfer-bench: decode and prefill throughput through the public C ABI, as JSON Lines.
//
//   pulseinfer-bench --model PATH [--random-weights] [--backend auto|cpu|cuda]
//       [--weight-type auto|f32|bf16|quantized]
//       [--decode 1x4096,8x16384] [--decode-steps N] [--prefill CONTEXT]
//       [--prefill-chunk TOKENS] [--hbm-gb-s 4250] [--peak-tflops 790]
//       [--modes dense,solohead,headwise] [--budget 2048] [--sink TOKENS] [--window TOKENS]
//       [--slot-tokens TOKENS] [--block-tokens TOKENS] (the library's defaults where left out)
//       [--copy auto|gather|batch-dma|per-chunk] [--summary-radius R] [--summary-boxes N]
//       [--summary-precision f32|bf16|int8|int4] [--admission every|adaptive] [--graphs on,off]
//       [--micro-batches 0,1,2] [--fill-free-slots on,off] [--host-codecs raw,fp8]
//       [--link-gb-s GB_S] [--device NAME]
//       [--commit SHA]
//       [--out FILE.jsonl]
//
// Decode: for each BATCHxCONTEXT, BATCH requests with random CONTEXT-token prompts are prefilled,
// then generate --decode-steps tokens each (greedy, end of sequence ignored); every engine step
// in which all BATCH requests decode is timed on the host clock (the step returns once the
// sampled tokens are on the host). TPOT is the median (p50) and 99th percentile of those steps
// after two warm-up steps. The HBM floor is the bytes a dense decode step must read: every weight
// but the embedding table (only BATCH rows of it are read) plus the KV cache of every request,
// over --hbm-gb-s.
// Each decode shape runs in every mode of --modes: dense, or offloaded sparse attention
// (solohead, headwise) with --budget, every request offloaded (--admission every, the default
// here; adaptive places them as an engine does by default). Offloaded, the KV cache holds each
// request's sinks and window and one prompt being prefilled (requests prefill one after another),
// the host tier every request's whole context and the device slots every request's budget (or
// --slot-tokens a request: as many as the context keeps every recalled block resident, which leaves
// the step's cost without its recall); the record adds the recall bytes a timed step moved, the
// copy engine's rate on them, the slot-cache hit rate and the host's time planning a step's
// selection (selection_ms_per_step: the selection itself runs on the device). Its HBM floor counts
// the KV of the tokens attended (the budget, at most the context). Every decode record has
// host_syncs_per_step, the host's waits for the device inside a timed step besides reading its
// tokens (pulse_engine_stats.host_waits), and link_gb_s, the host-to-device rate of one large
// pinned copy measured in the same run (--link-gb-s: scripts/gpu-bench measures it with
// pulse-recall-bench first; null when not given). And each in every setting of --graphs (default
// on): decode steps replayed as graphs (where the backend has them:
// pulse_engine_params.decode_graphs) or launched op by op; the record says which. And in every
// setting of --micro-batches (pulse_engine_params.micro_batches, default 0: the library chooses
// each step; 1: one micro-batch, each layer's recall exposed; 2: two, interleaved so that one's
// recall lands while the other computes): the record has the setting and the share of timed steps
// that ran split (split_step_share). Offloaded modes run in every setting of --fill-free-slots
// (pulse_engine_params.offload_fill_free_slots, default on: the blocks a request stops keeping
// resident also fill the free slots; off: only the host tier keeps them, so that with slots for
// the context a step still recalls each block the first time it is picked), and of
// --host-codecs (pulse_engine_params.offload_host_codec, default raw: the host tier keeps the
// device's blocks; fp8: a byte a value and a scale per KV head's keys or values, decoded in the
// recall); every decode record says which ("codec": fp8, or the device's bf16 or f32). Prefill: one
// random CONTEXT-token prompt, submit to first token; FLOPs are the GEMMs' 2 * m * n
// * k of every layer plus causal attention (QK^T and PV over the keys each position sees).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "pulseinfer/pulseinfer.h"

namespace {

using pulse_bench::Check;
using pulse_bench::CopyExecutor;
using pulse_bench::Describe;
using pulse_bench::EngineBlockTokens;
using pulse_bench::EngineStats;
using pulse_bench::Fail;
using pulse_bench::Greedy;
using pulse_bench::JsonString;
using pulse_bench::LiveTable;
using pulse_bench::ModelFacts;
using pulse_bench::Number;
using pulse_bench::Percentile;
using pulse_bench::RandomPrompt;
using pulse_bench::Records;
using pulse_bench::RoundUp;
using pulse_bench::SplitList;

using Clock = std::chrono::steady_clock;

struct Shape {
  int32_t batch = 0;
  int32_t context = 0;
};

struct Args {
  std::string model;
  bool random_weights = false;
  std::string backend = "auto";
  std::string weight_type = "auto";
  std::vector<Shape> decode;
  int32_t decode_steps = 32;
  int32_t prefill_context = 0;
  int32_t prefill_chunk = 8192;
  double hbm_gb_s = 4250.0;
  double peak_tflops = 790.0;
  std::vector<std::string> modes = {"dense"};
  int32_t budget = 2048;
  int32_t sink = -1;         // < 0 (as parsed): the library's default
  int32_t window = -1;       // < 0 (as parsed): the library's default
  int32_t slot_tokens = 0;   // a request's device slots; 0 (as parsed): its budget
  int32_t block_tokens = 0;  // 0: the library's choice (EngineBlockTokens)
  std::string copy = "auto";
  double summary_radius = -1;     // < 0 (as parsed): the library's default
  int32_t summary_boxes = -1;     // < 0 (as parsed): the library's default
  std::string summary_precision;  // empty (as parsed): the library's default
  std::string admission = "every";
  std::vector<bool> graphs = {true};
  std::vector<bool> fill_free_slots = {true};
  std::vector<int32_t> micro_batches = {0};
  std::vector<int32_t> host_codecs = {PULSE_HOST_CODEC_RAW};
  double link_gb_s = 0;  // 0: not measured
  std::string device = "unknown";
  std::string commit = "unknown";
  std::string out;
  std::string command;
};

std::vector<Shape> ParseShapes(const std::string& text) {
  std::vector<Shape> shapes;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    Shape shape;
    if (std::sscanf(item.c_str(), "%dx%d", &shape.batch, &shape.context) != 2 || shape.batch < 1 ||
        shape.context < 1) {
      Fail("--decode expects BATCHxCONTEXT[,...], got '" + item + "'");
    }
    shapes.push_back(shape);
    begin = end + 1;
  }
  return shapes;
}

constexpr std::pair<const char*, int32_t> kSummaryPrecisions[] = {{"f32", PULSE_SUMMARY_F32},
                                                                  {"bf16", PULSE_SUMMARY_BF16},
                                                                  {"int8", PULSE_SUMMARY_INT8},
                                                                  {"int4", PULSE_SUMMARY_INT4}};

int32_t SummaryPrecision(const std::string& name) {
  for (const auto& [known, code] : kSummaryPrecisions) {
    if (name == known) return code;
  }
  Fail("--summary-precision expects f32, bf16, int8 or int4, got '" + name + "'");
}

std::string SummaryPrecisionName(int32_t code) {
  for (const auto& [name, known] : kSummaryPrecisions) {
    if (code == known) return name;
  }
  Fail("the library's default summary precision " + std::to_string(code) + " has no name here");
}

// A list of on and off settings, e.g. "on,off".
std::vector<bool> OnOffList(const std::string& flag, const std::string& value) {
  std::vector<bool> settings;
  for (const std::string& setting : SplitList(value)) {
    if (setting != "on" && setting != "off") {
      Fail(flag + " expects on and/or off, got '" + setting + "'");
    }
    settings.push_back(setting == "on");
  }
  return settings;
}

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
    } else if (flag == "--weight-type") {
      args.weight_type = value;
    } else if (flag == "--decode") {
      args.decode = ParseShapes(value);
    } else if (flag == "--decode-steps") {
      args.decode_steps = std::atoi(value.c_str());
    } else if (flag == "--prefill") {
      args.prefill_context = std::atoi(value.c_str());
    } else if (flag == "--prefill-chunk") {
      args.prefill_chunk = std::atoi(value.c_str());
    } else if (flag == "--hbm-gb-s") {
      args.hbm_gb_s = std::atof(value.c_str());
    } else if (flag == "--peak-tflops") {
      args.peak_tflops = std::atof(value.c_str());
    } else if (flag == "--modes") {
      args.modes = SplitList(value);
      for (const std::string& mode : args.modes) {
        if (mode != "dense" && mode != "solohead" && mode != "headwise") {
          Fail("--modes expects dense, solohead or headwise, got '" + mode + "'");
        }
      }
    } else if (flag == "--budget") {
      args.budget = std::atoi(value.c_str());
    } else if (flag == "--sink") {
      args.sink = std::atoi(value.c_str());
    } else if (flag == "--window") {
      args.window = std::atoi(value.c_str());
    } else if (flag == "--block-tokens") {
      args.block_tokens = std::atoi(value.c_str());
    } else if (flag == "--slot-tokens") {
      args.slot_tokens = std::atoi(value.c_str());
    } else if (flag == "--copy") {
      args.copy = value;
    } else if (flag == "--summary-radius") {
      args.summary_radius = std::atof(value.c_str());
    } else if (flag == "--summary-boxes") {
      args.summary_boxes = std::atoi(value.c_str());
    } else if (flag == "--summary-precision") {
      args.summary_precision = value;
    } else if (flag == "--admission") {
      if (value != "every" && value != "adaptive") {
        Fail("--admission expects every or adaptive, got '" + value + "'");
      }
      args.admission = value;
    } else if (flag == "--fill-free-slots") {
      args.fill_free_slots = OnOffList(flag, value);
    } else if (flag == "--graphs") {
      args.graphs = OnOffList(flag, value);
    } else if (flag == "--micro-batches") {
      args.micro_batches = pulse_bench::ParseMicroBatches(flag, value);
    } else if (flag == "--host-codecs") {
      args.host_codecs = pulse_bench::ParseHostCodecs(flag, value);
    } else if (flag == "--link-gb-s") {
      args.link_gb_s = std::atof(value.c_str());
      if (!(args.link_gb_s > 0)) Fail("--link-gb-s expects a positive rate");
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
  if (args.decode_steps < 4 || args.prefill_chunk < 1)
    Fail("bad --decode-steps or --prefill-chunk");
  if (args.slot_tokens < 0 || args.block_tokens < 0) Fail("bad --slot-tokens or --block-tokens");
  if (args.slot_tokens == 0) args.slot_tokens = args.budget;
  pulse_engine_params defaults;
  Check(pulse_engine_params_init(&defaults, sizeof(defaults)), "pulse_engine_params_init");
  if (args.sink < 0) args.sink = defaults.offload_sink_tokens;
  if (args.window < 0) args.window = defaults.offload_window_tokens;
  if (args.summary_radius < 0) args.summary_radius = defaults.offload_summary_radius;
  if (args.summary_boxes < 0) args.summary_boxes = defaults.offload_summary_boxes;
  if (args.summary_precision.empty()) {
    args.summary_precision = SummaryPrecisionName(defaults.offload_summary_precision);
  }
  return args;
}

// `mode`: "dense", "solohead" or "headwise" (then offloaded with args' budget, sink and window).
// How a decode run is set up besides its shape and mode.
struct Setting {
  bool graphs = true;
  int32_t micro_batches = 0;
  bool fill_free_slots = true;
  int32_t host_codec = PULSE_HOST_CODEC_RAW;
};

pulse_engine* CreateEngine(pulse_model* model, int32_t batch, int32_t context, int32_t extra,
                           int32_t chunk, const std::string& mode, Setting setting,
                           const Args& args) {
  pulse_engine_params params;
  Check(pulse_engine_params_init(&params, sizeof(params)), "pulse_engine_params_init");
  params.decode_graphs = setting.graphs ? 1 : 0;
  params.micro_batches = setting.micro_batches;
  params.max_batch = batch;
  params.prefill_chunk = chunk;
  params.max_step_tokens = std::max(chunk, batch);
  params.max_context = context + extra;
  params.block_tokens = args.block_tokens;
  const int32_t block = EngineBlockTokens(args.block_tokens, mode != "dense");
  // Whole blocks for every request: admission reserves each request's blocks.
  const int64_t request_tokens = RoundUp(context + extra, block);
  params.kv_capacity_tokens = int64_t{batch} * request_tokens;
  if (mode != "dense") {
    params.offload_mode = mode == "solohead" ? PULSE_OFFLOAD_SOLOHEAD : PULSE_OFFLOAD_HEADWISE;
    params.offload_budget_tokens = args.budget;
    params.offload_sink_tokens = args.sink;
    params.offload_window_tokens = args.window;
    params.offload_executor = CopyExecutor(args.copy);
    params.offload_summary_radius = args.summary_radius;
    params.offload_summary_boxes = args.summary_boxes;
    params.offload_summary_precision = SummaryPrecision(args.summary_precision);
    params.offload_admission =
        args.admission == "every" ? PULSE_ADMIT_OFFLOAD_EVERY : PULSE_ADMIT_IO_ADAPTIVE;
    params.offload_fill_free_slots = setting.fill_free_slots ? 1 : 0;
    params.offload_host_codec = setting.host_codec;
    // Each request's sinks, window and the block written (the engine's resident limit), and
    // one prompt being prefilled.
    const int64_t resident = RoundUp(args.sink, block) + RoundUp(args.window, block) + 2 * block;
    params.kv_capacity_tokens = int64_t{batch} * resident + RoundUp(context, block);
    params.offload_host_tokens = int64_t{batch} * request_tokens;
    params.offload_slot_tokens = int64_t{batch} * RoundUp(args.slot_tokens, block);
  }
  pulse_engine* engine = nullptr;
  Check(pulse_engine_create(model, &params, &engine), "pulse_engine_create");
  return engine;
}

// How the benchmark's requests ended, for an error message.
std::string RequestOutcome(pulse_engine* engine, const std::vector<uint64_t>& ids) {
  std::string outcome;
  for (const uint64_t id : ids) {
    size_t count = 0;
    const pulse_status status = pulse_request_result(engine, id, nullptr, 0, &count);
    outcome += "request " + std::to_string(id) + ": " + pulse_status_string(status) +
               (status == PULSE_OK || status == PULSE_AGAIN
                    ? ""
                    : std::string(" (") + pulse_last_error() + ")") +
               "; ";
  }
  return outcome;
}

// Fails unless request `id` finished without an error after generating `tokens` tokens: a
// request that failed ends at once, and its time is not a measurement.
void RequireGenerated(pulse_engine* engine, uint64_t id, int32_t tokens) {
  pulse_request_stats stats;
  stats.struct_size = sizeof(stats);
  Check(pulse_request_stats_get(engine, id, &stats), "pulse_request_stats_get");
  if (stats.error != PULSE_OK || stats.generated_tokens != tokens) {
    Fail("the prefill request did not generate its " + std::to_string(tokens) +
         " token(s): " + RequestOutcome(engine, {id}));
  }
}

void BenchDecode(pulse_model* model, const ModelFacts& facts, const Args& args, Shape shape,
                 const std::string& mode, Setting setting, Records& records, LiveTable& table) {
  // Prompts are prefilled a chunk a step while earlier requests decode (which take a token each
  // from the step's max(chunk, batch) tokens); offloaded, one prompt after another, each waiting
  // a step for the KV cache the previous one frees. Enough tokens for every request to still
  // decode once the last prefill is done, then the timed steps.
  const int32_t chunk = std::max(1, args.prefill_chunk - shape.batch);
  const int32_t prefill_steps =
      shape.batch * ((shape.context + chunk - 1) / chunk + 2) + shape.batch;
  const int32_t max_tokens = prefill_steps + args.decode_steps + 1;
  pulse_engine* engine = CreateEngine(model, shape.batch, shape.context, max_tokens,
                                      args.prefill_chunk, mode, setting, args);
  const pulse_sampling_params sampling = Greedy(max_tokens);
  std::vector<uint64_t> ids;
  for (int32_t r = 0; r < shape.batch; ++r) {
    const std::vector<int32_t> prompt = RandomPrompt(shape.context, facts.info.vocab_size, r + 1);
    uint64_t id = 0;
    Check(pulse_request_submit(engine, prompt.data(), prompt.size(), &sampling, nullptr, nullptr,
                               &id),
          "pulse_request_submit");
    ids.push_back(id);
  }
  std::vector<double> decode_ms;
  std::vector<double> kv_tokens;  // cached tokens every request attends to, for each timed step
  pulse_engine_stats before{};
  while (decode_ms.size() < static_cast<size_t>(args.decode_steps)) {
    pulse_step_report report;
    report.struct_size = sizeof(report);
    const pulse_engine_stats start_stats = EngineStats(engine);
    const Clock::time_point start = Clock::now();
    Check(pulse_engine_step(engine, &report), "pulse_engine_step");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (report.pending < shape.batch) {
      Fail("a benchmark request ended before the timed steps did: " + RequestOutcome(engine, ids));
    }
    if (report.prefill_tokens != 0 || report.decode_tokens != shape.batch) continue;
    decode_ms.push_back(ms);
    if (decode_ms.size() == 3) before = start_stats;  // after the two warm-up steps
    double tokens = 0;
    for (const uint64_t id : ids) {
      pulse_request_stats stats;
      stats.struct_size = sizeof(stats);
      Check(pulse_request_stats_get(engine, id, &stats), "pulse_request_stats_get");
      tokens += stats.prompt_tokens + stats.generated_tokens - 1;  // the step's input was the last
    }
    kv_tokens.push_back(tokens);
  }
  const pulse_engine_stats after = EngineStats(engine);
  const int64_t device_blocks = int64_t{after.kv_blocks} + after.slot_blocks;
  pulse_engine_free(engine);
  decode_ms.erase(decode_ms.begin(), decode_ms.begin() + 2);  // warm-up
  kv_tokens.erase(kv_tokens.begin(), kv_tokens.begin() + 2);
  const double p50 = Percentile(decode_ms, 0.5);
  const double p99 = Percentile(decode_ms, 0.99);
  // Each step reads the keys and values of every token it attends to, its own new one included.
  const double context_tokens = Percentile(kv_tokens, 0.5) + shape.batch;
  const double attended = mode == "dense"
                              ? context_tokens
                              : std::min(context_tokens, double(shape.batch) * args.budget);
  const double kv_read = facts.kv_bytes_per_token * attended;
  const double floor_ms = (facts.weight_bytes_read + kv_read) / (args.hbm_gb_s * 1e9) * 1e3;
  const int32_t block = EngineBlockTokens(args.block_tokens, mode != "dense");
  // The device memory the KV takes: the KV cache and, offloaded, the slots.
  const double kv_gib = facts.kv_bytes_per_token * double(device_blocks) * block / double(1u << 30);
  std::string offload =
      ", \"recall_bytes_per_step\": 0, \"pcie_gb_s\": null, \"cache_hit_rate\": null";
  std::string budget = "null";
  std::string recall_gb_s = "-";
  std::string hit_rate = "-";
  if (mode != "dense") {
    const double steps = static_cast<double>(decode_ms.size());
    const double bytes = double(after.recall_bytes - before.recall_bytes);
    const double ms = after.recall_ms - before.recall_ms;
    const double hits = double(after.slot_hits - before.slot_hits);
    const double lookups = hits + double(after.slot_misses - before.slot_misses);
    offload = ", \"recall_bytes_per_step\": " + Number(bytes / steps) +
              ", \"recall_transfers_per_step\": " +
              Number(double(after.recall_transfers - before.recall_transfers) / steps) +
              ", \"recall_ms_per_step\": " + Number(ms / steps) + ", \"selection_ms_per_step\": " +
              Number((after.selection_ms - before.selection_ms) / steps) +
              ", \"pcie_gb_s\": " + (ms > 0 ? Number(bytes / ms / 1e6) : std::string("null")) +
              ", \"cache_hit_rate\": " + (lookups > 0 ? Number(hits / lookups) : "null") +
              ", \"copy\": " + JsonString(args.copy) + ", \"sink\": " + std::to_string(args.sink) +
              ", \"window\": " + std::to_string(args.window) +
              ", \"block_tokens\": " + std::to_string(block) +
              ", \"slot_tokens\": " + std::to_string(args.slot_tokens) +
              ", \"summary_radius\": " + Number(args.summary_radius) +
              ", \"summary_boxes\": " + std::to_string(args.summary_boxes) +
              ", \"summary_precision\": " + JsonString(args.summary_precision) +
              ", \"admission\": " + JsonString(args.admission) +
              ", \"fill_free_slots\": " + (setting.fill_free_slots ? "true" : "false") +
              ", \"admitted_offloaded\": " + std::to_string(after.admitted_offloaded) +
              ", \"staged_requests\": " + std::to_string(after.staged_requests);
    budget = std::to_string(args.budget);
    if (ms > 0) recall_gb_s = pulse_bench::Fixed(bytes / ms / 1e6, 1);
    if (lookups > 0) hit_rate = pulse_bench::Fixed(hits / lookups, 2);
  }
  table.Row({mode, setting.graphs ? "on" : "off", std::to_string(setting.micro_batches),
             mode == "dense" ? "-" : (setting.fill_free_slots ? "on" : "off"),
             pulse_bench::CodecName(setting.host_codec, facts.info.backend),
             std::to_string(shape.batch) + "x" + std::to_string(shape.context), budget,
             pulse_bench::Fixed(p50, 2), pulse_bench::Fixed(p99, 2),
             pulse_bench::Fixed(shape.batch / p50 * 1e3, 1), recall_gb_s, hit_rate,
             pulse_bench::Fixed(floor_ms / p50, 2)});
  records.Write(
      "decode",
      "\"mode\": " + JsonString(mode == "dense" ? mode : "offload-" + mode) +
          ", \"graphs\": " + (setting.graphs ? "true" : "false") + ", \"micro_batches\": " +
          std::to_string(setting.micro_batches) + ", \"split_step_share\": " +
          Number(double(after.split_steps - before.split_steps) / double(decode_ms.size())) +
          ", \"model\": " + JsonString(facts.name) +
          ", \"backend\": " + JsonString(facts.info.backend) + ", \"codec\": " +
          JsonString(pulse_bench::CodecName(setting.host_codec, facts.info.backend)) +
          ", \"weight_type\": " + JsonString(facts.info.weight_type) + ", \"batch\": " +
          std::to_string(shape.batch) + ", \"context\": " + std::to_string(shape.context) +
          ", \"budget\": " + budget + ", \"gpu_kv_cap_gib\": " + Number(kv_gib) +
          ", \"tpot_ms_p50\": " + Number(p50) + ", \"tpot_ms_p99\": " + Number(p99) +
          ", \"decode_tok_s\": " + Number(shape.batch / p50 * 1e3) + offload +
          ", \"weight_bytes_read\": " + Number(facts.weight_bytes_read) +
          ", \"kv_bytes_read\": " + Number(kv_read) + ", \"hbm_gb_s\": " + Number(args.hbm_gb_s) +
          ", \"host_syncs_per_step\": " +
          Number(double(after.host_waits - before.host_waits) / double(decode_ms.size())) +
          ", \"link_gb_s\": " + (args.link_gb_s > 0 ? Number(args.link_gb_s) : "null") +
          ", \"hbm_floor_ms\": " + Number(floor_ms) + ", \"roofline_fraction\": " +
          Number(floor_ms / p50) + ", \"steps_timed\": " + std::to_string(decode_ms.size()));
}

void BenchPrefill(pulse_model* model, const ModelFacts& facts, const Args& args, Records& records) {
  const int32_t context = args.prefill_context;
  pulse_engine* engine =
      CreateEngine(model, 1, context, 1, args.prefill_chunk, "dense", Setting{}, args);
  const pulse_sampling_params sampling = Greedy(1);
  const std::vector<int32_t> prompt = RandomPrompt(context, facts.info.vocab_size, 7);
  // A short request first, so that one-time costs (cuBLASLt plans, first launches) are paid.
  const std::vector<int32_t> warm(std::min(context, args.prefill_chunk), 1);
  uint64_t id = 0;
  Check(pulse_request_submit(engine, warm.data(), warm.size(), &sampling, nullptr, nullptr, &id),
        "pulse_request_submit");
  Check(pulse_engine_run(engine), "pulse_engine_run");
  RequireGenerated(engine, id, 1);
  const Clock::time_point start = Clock::now();
  Check(
      pulse_request_submit(engine, prompt.data(), prompt.size(), &sampling, nullptr, nullptr, &id),
      "pulse_request_submit");
  Check(pulse_engine_run(engine), "pulse_engine_run");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  RequireGenerated(engine, id, 1);
  pulse_engine_free(engine);
  const pulse_model_info& info = facts.info;
  const double gemm_flops = 2.0 * facts.gemm_params * context;
  const double attention_flops = 4.0 * info.num_layers * info.num_heads * info.head_dim *
                                 (double(context) * (context + 1) / 2);
  const double tflops = (gemm_flops + attention_flops) / seconds / 1e12;
  records.Write(
      "prefill",
      "\"model\": " + JsonString(facts.name) + ", \"backend\": " + JsonString(info.backend) +
          ", \"weight_type\": " + JsonString(info.weight_type) + ", \"context\": " +
          std::to_string(context) + ", \"chunk\": " + std::to_string(args.prefill_chunk) +
          ", \"seconds\": " + Number(seconds) + ", \"gemm_tflop\": " + Number(gemm_flops / 1e12) +
          ", \"attention_tflop\": " + Number(attention_flops / 1e12) +
          ", \"tflops\": " + Number(tflops) + ", \"peak_tflops\": " + Number(args.peak_tflops) +
          ", \"peak_fraction\": " + Number(tflops / args.peak_tflops));
}

}  // namespace

int main(int argc, char** argv) {
  pulse_bench::SetProgramName("pulseinfer-bench");
  const Args args = ParseArgs(argc, argv);
  pulse_model* model =
      pulse_bench::LoadModel(args.model, args.backend, args.random_weights, args.weight_type);
  const ModelFacts facts = Describe(model, args.model);
  Records records(args.out, args.device, args.commit, args.command);
  LiveTable table({"mode", "graphs", "mb", "fill", "codec", "shape", "budget", "TPOT p50 ms",
                   "p99 ms", "tokens/s", "recall GB/s", "hit rate", "of floor"});
  for (const Shape shape : args.decode) {
    for (const std::string& mode : args.modes) {
      for (const bool graphs : args.graphs) {
        for (const int32_t micro_batches : args.micro_batches) {
          // These settings apply to offloaded modes only.
          const bool dense = mode == "dense";
          const std::vector<bool> fills = dense ? std::vector<bool>{true} : args.fill_free_slots;
          const std::vector<int32_t> codecs =
              dense ? std::vector<int32_t>{PULSE_HOST_CODEC_RAW} : args.host_codecs;
          for (const bool fill : fills) {
            for (const int32_t codec : codecs) {
              BenchDecode(model, facts, args, shape, mode,
                          {.graphs = graphs,
                           .micro_batches = micro_batches,
                           .fill_free_slots = fill,
                           .host_codec = codec},
                          records, table);
            }
          }
        }
      }
    }
  }
  if (args.prefill_context > 0) BenchPrefill(model, facts, args, records);
  pulse_model_free(model);
  return 0;
}
