// pulse-recall-bench: the copy engine alone, on Llama-3.1-8B-shaped KV chunks scattered over a
// large pinned host tier, each executor in both directions, against one large copy (the link)
// measured in the same run; then the gather executor beside an HBM-bound kernel.
//
//   pulse-recall-bench [--backend cuda|cpu] [--host-gib 4] [--device-gib 1] [--plan-mib 64]
//       [--runs 30] [--gather-blocks 16] [--hbm-rows 8192] [--link-only 0|1] [--device NAME]
//       [--commit SHA] [--out FILE.jsonl]
//
// --link-only 1 measures the link alone ("bench": "link" records, one a direction): what
// scripts/gpu-bench gives pulseinfer-bench as --link-gb-s.
// A plan moves --plan-mib MiB in chunks of one size between random distinct slots of the host
// tier (grown a GiB at a time) and of the device tier; four scatters take turns, and both tiers
// hold a random pattern, never zeros. Each figure: one ungated pass of --runs plans (warm-up; it
// also times how fast the host enqueues plans, "host GB/s"), then --runs plans behind a gate: the
// copy stream waits (after_compute) for a run of the HBM-bound kernel long enough for the host to
// enqueue them all, so they run back to back on the copy engine alone. Each plan follows a marker
// (an empty plan); its time is CopySeconds(marker, plan), the figure the median plan. "gated: no"
// says the host was still enqueueing when the gate opened (per-chunk copies of small chunks),
// so that figure includes the host's time. The link is one copy of a GiB by one cudaMemcpyAsync.
// Then whole 32-token blocks through each host codec ("bench": "recall-codec"): bf16 (the
// device's form) and fp8, at equal blocks, "gb_s" the host tier's bytes a second over the link
// and "device_gb_s" the device's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/kv_codec.h"
#include "core/backend/cuda/cuda_backend.h"
#include "nlohmann/json.hpp"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

constexpr std::string_view kUsage =
    "usage: pulse-recall-bench [--backend cuda|cpu] [--host-gib 4] [--device-gib 1] "
    "[--plan-mib 64] [--runs 30] [--gather-blocks 16] [--hbm-rows 8192] [--device NAME] "
    "[--commit SHA] [--out FILE.jsonl]";

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kMiB = size_t{1} << 20;
constexpr int kWarmup = 3;
constexpr int kScatters = 4;
constexpr size_t kPatternBytes = 16 * kMiB;
// Llama-3.1-8B: 8 KV heads of head_dim 128, bf16. One head's keys of a 16- and a 32-token block
// (head-wise selection's fragments), a 64 KiB chunk, and a SoloHead block (32 tokens, all heads,
// K and V).
constexpr size_t kChunkSizes[] = {16 * 128 * 2, 32 * 128 * 2, 64 << 10, 32 * 8 * 128 * 2 * 2};
constexpr size_t kInterferenceChunkSizes[] = {16 * 128 * 2, 32 * 8 * 128 * 2 * 2};
constexpr int64_t kMlpInter = 14336;
constexpr CopyExecutor kExecutors[] = {CopyExecutor::kGather, CopyExecutor::kBatchDma,
                                       CopyExecutor::kPerChunk};

struct Args {
  std::string backend = "cuda";
  double host_gib = 4;
  double device_gib = 1;
  int64_t plan_mib = 64;
  int32_t runs = 30;
  int32_t gather_blocks = 16;
  int64_t hbm_rows = 8192;
  bool link_only = false;
  std::string device = "unknown";
  std::string commit = "unknown";
  std::string out;
  std::string command;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  args.command = absl::StrJoin(argv, argv + argc, " ");
  if (argc % 2 == 0) return absl::InvalidArgumentError("a flag needs a value");
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    bool ok = true;
    if (flag == "--backend") {
      args.backend = value;
    } else if (flag == "--host-gib") {
      ok = absl::SimpleAtod(value, &args.host_gib);
    } else if (flag == "--device-gib") {
      ok = absl::SimpleAtod(value, &args.device_gib);
    } else if (flag == "--plan-mib") {
      ok = absl::SimpleAtoi(value, &args.plan_mib);
    } else if (flag == "--runs") {
      ok = absl::SimpleAtoi(value, &args.runs);
    } else if (flag == "--gather-blocks") {
      ok = absl::SimpleAtoi(value, &args.gather_blocks);
    } else if (flag == "--hbm-rows") {
      ok = absl::SimpleAtoi(value, &args.hbm_rows);
    } else if (flag == "--link-only") {
      ok = value == "0" || value == "1";
      args.link_only = value == "1";
    } else if (flag == "--device") {
      args.device = value;
    } else if (flag == "--commit") {
      args.commit = value;
    } else if (flag == "--out") {
      args.out = value;
    } else {
      return absl::InvalidArgumentError("unknown flag " + flag);
    }
    if (!ok) return absl::InvalidArgumentError("bad value for " + flag);
  }
  if (args.backend != "cuda" && args.backend != "cpu") {
    return absl::InvalidArgumentError("--backend is cuda or cpu");
  }
  if (args.runs < 1 || args.plan_mib < 1 || args.hbm_rows < 1 || !(args.host_gib > 0) ||
      !(args.device_gib > 0)) {
    return absl::InvalidArgumentError("--runs, --plan-mib, --hbm-rows and the tiers must be > 0");
  }
  return args;
}

std::vector<unsigned char> Pattern(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> bytes(kPatternBytes);
  for (size_t i = 0; i < bytes.size(); i += 8) {
    const uint64_t word = rng() | 1;  // no zero byte at the word's start, no zero word
    std::memcpy(bytes.data() + i, &word, 8);
  }
  return bytes;
}

// The host tier grows a GiB at a time (as an engine would grow it), the device tier is one
// allocation; both hold a random pattern.
struct Tiers {
  std::vector<HostBuffer> host;
  DeviceBuffer device;
};

absl::StatusOr<Tiers> MakeTiers(Backend& backend, const Args& args) {
  Tiers tiers;
  const std::vector<unsigned char> pattern = Pattern(1);
  const auto host_bytes = static_cast<size_t>(args.host_gib * kGiB);
  const auto start = std::chrono::steady_clock::now();
  for (size_t done = 0; done < host_bytes; done += kGiB) {
    PULSE_ASSIGN_OR_RETURN(HostBuffer chunk,
                           backend.AllocateHost(std::min(kGiB, host_bytes - done)));
    for (size_t at = 0; at < chunk.bytes(); at += kPatternBytes) {
      std::memcpy(chunk.as<unsigned char>() + at, pattern.data(),
                  std::min(kPatternBytes, chunk.bytes() - at));
    }
    tiers.host.push_back(std::move(chunk));
  }
  std::printf("host tier: %.2f GiB in %zu chunks, allocated and filled in %.1f s\n",
              double(host_bytes) / kGiB, tiers.host.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  PULSE_ASSIGN_OR_RETURN(tiers.device,
                         backend.Allocate(static_cast<size_t>(args.device_gib * kGiB)));
  const std::vector<unsigned char> device_pattern = Pattern(2);
  for (size_t at = 0; at < tiers.device.bytes(); at += kPatternBytes) {
    backend.CopyToDevice(tiers.device.as<unsigned char>() + at, device_pattern.data(),
                         std::min(kPatternBytes, tiers.device.bytes() - at));
  }
  PULSE_RETURN_IF_ERROR(backend.Synchronize());
  return tiers;
}

// `count` distinct indices of [0, n), in random order.
std::vector<size_t> Distinct(size_t n, size_t count, std::mt19937_64& rng) {
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  for (size_t i = 0; i < count; ++i) std::swap(all[i], all[i + rng() % (n - i)]);
  all.resize(count);
  return all;
}

// A recall plan's chunks: `count` random slots of `chunk_bytes` in the host tier (none across two
// of its allocations) to random slots of the device tier; with a codec, the host's slots are of
// the host tier's form (`host_chunk_bytes`).
absl::StatusOr<std::vector<CopyChunk>> Scatter(const Tiers& tiers, size_t chunk_bytes, size_t count,
                                               std::mt19937_64& rng, size_t host_chunk_bytes) {
  std::vector<std::pair<unsigned char*, size_t>> host_slots;  // allocation, slots in it
  size_t host_total = 0;
  for (const HostBuffer& buffer : tiers.host) {
    host_slots.emplace_back(buffer.as<unsigned char>(), buffer.bytes() / host_chunk_bytes);
    host_total += buffer.bytes() / host_chunk_bytes;
  }
  const size_t device_total = tiers.device.bytes() / chunk_bytes;
  if (count > host_total || count > device_total) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%u chunks of %u bytes do not fit the tiers: grow --host-gib / --device-gib", count,
        chunk_bytes));
  }
  const std::vector<size_t> sources = Distinct(host_total, count, rng);
  const std::vector<size_t> destinations = Distinct(device_total, count, rng);
  std::vector<CopyChunk> chunks(count);
  for (size_t i = 0; i < count; ++i) {
    size_t slot = sources[i];
    size_t a = 0;
    while (slot >= host_slots[a].second) slot -= host_slots[a++].second;
    chunks[i] = {host_slots[a].first + slot * host_chunk_bytes,
                 tiers.device.as<unsigned char>() + destinations[i] * chunk_bytes, chunk_bytes};
  }
  return chunks;
}

// SwiGLU over [rows][2 x 14336] fp32: an HBM-bound kernel, to load the compute stream.
class HbmKernel {
 public:
  static absl::StatusOr<HbmKernel> Create(Backend& backend, int64_t rows) {
    HbmKernel kernel(backend, rows);
    PULSE_ASSIGN_OR_RETURN(kernel.gate_up_, backend.Allocate(rows * 2 * kMlpInter * sizeof(float)));
    PULSE_ASSIGN_OR_RETURN(
        kernel.out_, backend.Allocate(rows * kMlpInter * DTypeBytes(backend.activation_type())));
    std::vector<float> values(kPatternBytes / sizeof(float));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    for (float& v : values) v = dist(rng);
    for (size_t at = 0; at < kernel.gate_up_.bytes(); at += kPatternBytes) {
      backend.CopyToDevice(kernel.gate_up_.as<unsigned char>() + at, values.data(),
                           std::min(kPatternBytes, kernel.gate_up_.bytes() - at));
    }
    kernel.Run(kWarmup);
    PULSE_RETURN_IF_ERROR(backend.Synchronize());
    constexpr int kCalls = 20;
    PULSE_ASSIGN_OR_RETURN(const double seconds, kernel.Time(kCalls));
    kernel.call_seconds_ = seconds / kCalls;
    return kernel;
  }

  void Run(int64_t calls) {
    for (int64_t i = 0; i < calls; ++i) {
      backend_->SwiGlu(gate_up_.as<float>(), rows_, kMlpInter, out_.data());
    }
  }
  // Seconds of `calls` runs, enqueued and waited for by the host.
  absl::StatusOr<double> Time(int64_t calls) {
    const auto start = std::chrono::steady_clock::now();
    Run(calls);
    PULSE_RETURN_IF_ERROR(backend_->Synchronize());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // Runs the kernel for at least `seconds` (in at most kMaxCalls calls).
  void RunFor(double seconds) {
    Run(std::min<int64_t>(kMaxCalls, static_cast<int64_t>(std::ceil(seconds / call_seconds_))));
  }
  double call_seconds() const { return call_seconds_; }
  double GbS(double seconds_per_call) const {
    return (double(rows_) * kMlpInter * 2 * sizeof(float) + double(out_.bytes())) /
           seconds_per_call / 1e9;
  }
  std::string Name() const { return absl::StrFormat("swiglu %dx%d", rows_, kMlpInter); }

 private:
  // Launches queued beyond about a thousand block the host: stay well below.
  static constexpr int64_t kMaxCalls = 512;

  HbmKernel(Backend& backend, int64_t rows) : backend_(&backend), rows_(rows) {}

  Backend* backend_;
  int64_t rows_;
  DeviceBuffer gate_up_;
  DeviceBuffer out_;
  double call_seconds_ = 0;
};

// Plans enqueued back to back, each after a marker.
struct Enqueued {
  std::vector<std::unique_ptr<CopyEvent>> markers;
  std::vector<std::unique_ptr<CopyEvent>> done;
  double host_seconds = 0;  // to enqueue them all
};

class Bench {
 public:
  Bench(Backend& backend, const Args& args, HbmKernel& kernel)
      : backend_(backend), args_(args), kernel_(kernel) {}
  ~Bench() {
    if (out_ != nullptr) std::fclose(out_);
  }

  absl::Status Open() {
    PULSE_ASSIGN_OR_RETURN(gate_, backend_.CreateCopyEvent());
    if (args_.out.empty()) return absl::OkStatus();
    out_ = std::fopen(args_.out.c_str(), "w");
    if (out_ == nullptr) return absl::NotFoundError("cannot open " + args_.out);
    return absl::OkStatus();
  }

  // Holds the copy stream until compute has run for `seconds`: the plans enqueued meanwhile then
  // run back to back, so their times are the copy engine's alone, not the host's preparation.
  absl::Status Gate(double seconds) {
    kernel_.RunFor(seconds);
    return backend_.EnqueueCopy({.chunks = {}, .after_compute = true}, *gate_);
  }
  const CopyEvent& gate() const { return *gate_; }

  absl::StatusOr<Enqueued> Enqueue(std::span<const std::vector<CopyChunk>> scatters,
                                   CopyDirection direction, CopyExecutor executor, int plans,
                                   HostCodec codec = HostCodec::kRaw,
                                   const PagedKvLayout& layout = {}) {
    Enqueued enqueued;
    for (int i = 0; i < plans; ++i) {
      PULSE_ASSIGN_OR_RETURN(enqueued.markers.emplace_back(), backend_.CreateCopyEvent());
      PULSE_ASSIGN_OR_RETURN(enqueued.done.emplace_back(), backend_.CreateCopyEvent());
    }
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < plans; ++i) {
      PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy({.chunks = {}}, *enqueued.markers[i]));
      const CopyPlan plan{.direction = direction,
                          .chunks = scatters[i % scatters.size()],
                          .executor = executor,
                          .codec = codec,
                          .layout = layout};
      PULSE_RETURN_IF_ERROR(backend_.EnqueueCopy(plan, *enqueued.done[i]));
    }
    enqueued.host_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return enqueued;
  }

  // Waits for the plans; the median seconds of a plan.
  absl::StatusOr<double> MedianSeconds(const Enqueued& enqueued) {
    PULSE_RETURN_IF_ERROR(backend_.SynchronizeCopy(*enqueued.done.back()));
    std::vector<double> seconds;
    for (size_t i = 0; i < enqueued.done.size(); ++i) {
      PULSE_ASSIGN_OR_RETURN(seconds.emplace_back(),
                             backend_.CopySeconds(*enqueued.markers[i], *enqueued.done[i]));
    }
    std::sort(seconds.begin(), seconds.end());
    const size_t n = seconds.size();
    return n % 2 == 1 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  }

  struct Rate {
    double seconds = 0;    // the median plan's
    double gb_s = 0;       // the copy engine's, per plan
    double host_gb_s = 0;  // plan bytes the host enqueues a second
    bool gated = false;    // whether every plan was enqueued before the first one ran
  };

  // The median plan of --runs: a warm-up pass ungated (which also times the host's enqueueing),
  // then the measured pass behind a gate long enough to enqueue it all.
  // With a codec, the rates count the device's bytes (the chunks').
  absl::StatusOr<Rate> Measure(std::span<const std::vector<CopyChunk>> scatters,
                               CopyDirection direction, CopyExecutor executor,
                               HostCodec codec = HostCodec::kRaw,
                               const PagedKvLayout& layout = {}) {
    PULSE_ASSIGN_OR_RETURN(const Enqueued warm,
                           Enqueue(scatters, direction, executor, args_.runs, codec, layout));
    PULSE_RETURN_IF_ERROR(MedianSeconds(warm).status());
    const double gate_seconds = 1.5 * warm.host_seconds + 2e-3;
    PULSE_RETURN_IF_ERROR(Gate(gate_seconds));
    PULSE_ASSIGN_OR_RETURN(const Enqueued timed,
                           Enqueue(scatters, direction, executor, args_.runs, codec, layout));
    PULSE_ASSIGN_OR_RETURN(const bool early, backend_.CopyDone(*gate_));
    PULSE_ASSIGN_OR_RETURN(const double seconds, MedianSeconds(timed));
    PULSE_RETURN_IF_ERROR(backend_.Synchronize());
    const double bytes = PlanBytes(scatters[0]);
    return Rate{.seconds = seconds,
                .gb_s = bytes / seconds / 1e9,
                .host_gb_s = bytes * args_.runs / timed.host_seconds / 1e9,
                .gated = !early};
  }

  void Write(nlohmann::json record) {
    record["device"] = args_.device;
    record["commit"] = args_.commit;
    record["command"] = args_.command;
    if (out_ != nullptr) std::fprintf(out_, "%s\n", record.dump().c_str());
  }

  static double PlanBytes(std::span<const CopyChunk> chunks) {
    double bytes = 0;
    for (const CopyChunk& chunk : chunks) bytes += chunk.bytes;
    return bytes;
  }

 private:
  Backend& backend_;
  const Args& args_;
  HbmKernel& kernel_;
  std::unique_ptr<CopyEvent> gate_;
  FILE* out_ = nullptr;
};

std::string DirectionName(CopyDirection direction) {
  return direction == CopyDirection::kHostToDevice ? "recall" : "write-back";
}

std::vector<std::vector<CopyChunk>> Reversed(std::span<const std::vector<CopyChunk>> plans) {
  std::vector<std::vector<CopyChunk>> reversed;
  for (const std::vector<CopyChunk>& chunks : plans) {
    std::vector<CopyChunk>& back = reversed.emplace_back(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      back[i] = {chunks[i].dst, const_cast<void*>(chunks[i].src), chunks[i].bytes};
    }
  }
  return reversed;
}

absl::StatusOr<std::vector<std::vector<CopyChunk>>> Scatters(const Tiers& tiers, size_t chunk_bytes,
                                                             size_t count, std::mt19937_64& rng,
                                                             size_t host_chunk_bytes = 0) {
  std::vector<std::vector<CopyChunk>> scatters;
  for (int s = 0; s < kScatters; ++s) {
    PULSE_ASSIGN_OR_RETURN(scatters.emplace_back(),
                           Scatter(tiers, chunk_bytes, count, rng,
                                   host_chunk_bytes == 0 ? chunk_bytes : host_chunk_bytes));
  }
  return scatters;
}

// One copy of a GiB (or the smaller tier) with one cudaMemcpyAsync: the link's speed.
absl::StatusOr<double> LinkGbS(Bench& bench, const Tiers& tiers, CopyDirection direction) {
  const size_t bytes = std::min({kGiB, tiers.host[0].bytes(), tiers.device.bytes()});
  std::vector<std::vector<CopyChunk>> plan = {{{tiers.host[0].data(), tiers.device.data(), bytes}}};
  if (direction == CopyDirection::kDeviceToHost) plan = Reversed(plan);
  PULSE_ASSIGN_OR_RETURN(const Bench::Rate rate,
                         bench.Measure(plan, direction, CopyExecutor::kPerChunk));
  return rate.gb_s;
}

// The gather beside the HBM-bound kernel, each against itself alone in the same run: the
// gather's plans inside a three times longer run of the kernel, then the kernel inside a three
// times longer run of plans.
absl::Status BenchInterference(Backend& backend, Bench& bench, HbmKernel& kernel,
                               const Tiers& tiers, const Args& args, size_t plan_bytes,
                               std::mt19937_64& rng) {
  const double kernel_alone = kernel.GbS(kernel.call_seconds());
  std::printf("\nHBM-bound kernel (%s) alone: %.0f GB/s, %.1f us a call\n", kernel.Name().c_str(),
              kernel_alone, kernel.call_seconds() * 1e6);
  std::printf("%-10s %8s %8s %12s %12s %12s %12s\n", "executor", "chunk", "chunks", "GB/s alone",
              "beside HBM", "HBM alone", "HBM beside");
  for (const size_t chunk_bytes : kInterferenceChunkSizes) {
    PULSE_ASSIGN_OR_RETURN(const std::vector<std::vector<CopyChunk>> scatters,
                           Scatters(tiers, chunk_bytes, plan_bytes / chunk_bytes, rng));
    const double bytes = Bench::PlanBytes(scatters[0]);
    PULSE_ASSIGN_OR_RETURN(
        const Bench::Rate alone,
        bench.Measure(scatters, CopyDirection::kHostToDevice, CopyExecutor::kGather));
    const double plan_seconds = bytes / (alone.gb_s * 1e9);
    const double gate_seconds = 1.5 * bytes * args.runs / (alone.host_gb_s * 1e9) + 2e-3;

    // The plans run beside the kernel.
    PULSE_RETURN_IF_ERROR(bench.Gate(gate_seconds));
    kernel.RunFor(3 * plan_seconds * args.runs);
    PULSE_ASSIGN_OR_RETURN(
        const Enqueued beside,
        bench.Enqueue(scatters, CopyDirection::kHostToDevice, CopyExecutor::kGather, args.runs));
    PULSE_ASSIGN_OR_RETURN(const double beside_seconds, bench.MedianSeconds(beside));
    PULSE_RETURN_IF_ERROR(backend.Synchronize());

    // The kernel runs beside the plans.
    constexpr int64_t kCalls = 20;
    const int plans =
        static_cast<int>(std::ceil(3 * kCalls * kernel.call_seconds() / plan_seconds));
    PULSE_RETURN_IF_ERROR(bench.Gate(1.5 * bytes * plans / (alone.host_gb_s * 1e9) + 2e-3));
    PULSE_ASSIGN_OR_RETURN(
        const Enqueued under,
        bench.Enqueue(scatters, CopyDirection::kHostToDevice, CopyExecutor::kGather, plans));
    PULSE_RETURN_IF_ERROR(backend.SynchronizeCopy(bench.gate()));
    PULSE_ASSIGN_OR_RETURN(const double kernel_seconds, kernel.Time(kCalls));
    PULSE_RETURN_IF_ERROR(bench.MedianSeconds(under).status());

    const double gather_beside = bytes / beside_seconds / 1e9;
    const double kernel_beside = kernel.GbS(kernel_seconds / kCalls);
    std::printf("%-10s %8zu %8zu %12.1f %12.1f %12.0f %12.0f\n", "gather", chunk_bytes,
                scatters[0].size(), alone.gb_s, gather_beside, kernel_alone, kernel_beside);
    bench.Write({{"bench", "recall-interference"},
                 {"executor", "gather"},
                 {"direction", "recall"},
                 {"chunk_bytes", chunk_bytes},
                 {"chunks", scatters[0].size()},
                 {"gather_blocks", args.gather_blocks},
                 {"gb_s", alone.gb_s},
                 {"gb_s_beside_hbm_kernel", gather_beside},
                 {"hbm_kernel", kernel.Name()},
                 {"hbm_gb_s", kernel_alone},
                 {"hbm_gb_s_beside_gather", kernel_beside}});
  }
  return absl::OkStatus();
}

// Whole SoloHead blocks through each host codec, both ways, on the gather executor, at equal
// blocks: the link carries the host tier's form (an fp8 block is half a bf16 one and its
// scales), the device holds bf16 either way.
absl::Status BenchCodecs(Bench& bench, const Tiers& tiers, const Args& args, size_t plan_bytes,
                         const double (&link)[2], std::mt19937_64& rng) {
  constexpr PagedKvLayout kLayout{
      .block_tokens = 32, .num_kv_heads = 8, .head_dim = 128, .type = DType::kBF16};
  const auto block = static_cast<size_t>(kLayout.block_bytes());
  const size_t blocks = plan_bytes / block;
  std::printf("\n%-10s %-6s %8s %10s %12s %8s %14s\n", "direction", "codec", "blocks", "ms a plan",
              "link GB/s", "of link", "device GB/s");
  for (const HostCodec codec : {HostCodec::kRaw, HostCodec::kFp8E4m3}) {
    const auto host_block = static_cast<size_t>(HostBlockBytes(kLayout, codec));
    PULSE_ASSIGN_OR_RETURN(const std::vector<std::vector<CopyChunk>> recalls,
                           Scatters(tiers, block, blocks, rng, host_block));
    const std::vector<std::vector<CopyChunk>> write_backs = Reversed(recalls);
    for (const CopyDirection direction :
         {CopyDirection::kHostToDevice, CopyDirection::kDeviceToHost}) {
      const bool recall = direction == CopyDirection::kHostToDevice;
      PULSE_ASSIGN_OR_RETURN(const Bench::Rate rate,
                             bench.Measure(recall ? recalls : write_backs, direction,
                                           CopyExecutor::kGather, codec, kLayout));
      const double link_gb_s = double(blocks * host_block) / rate.seconds / 1e9;
      const double of_link = link_gb_s / link[static_cast<int>(direction)];
      const std::string name = codec == HostCodec::kRaw ? "bf16" : "fp8";
      std::printf("%-10s %-6s %8zu %10.3f %12.1f %7.0f%% %14.1f\n",
                  DirectionName(direction).c_str(), name.c_str(), blocks, rate.seconds * 1e3,
                  link_gb_s, 100 * of_link, rate.gb_s);
      bench.Write({{"bench", "recall-codec"},
                   {"codec", name},
                   {"executor", "gather"},
                   {"direction", DirectionName(direction)},
                   {"block_bytes", block},
                   {"host_block_bytes", host_block},
                   {"blocks", blocks},
                   {"gather_blocks", args.gather_blocks},
                   {"ms_per_plan", rate.seconds * 1e3},
                   {"gb_s", link_gb_s},
                   {"device_gb_s", rate.gb_s},
                   {"link_gb_s", link[static_cast<int>(direction)]},
                   {"gated", rate.gated},
                   {"runs", args.runs}});
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Backend>> MakeBackend(const Args& args) {
  if (args.backend == "cpu") return CreateCpuBackend({});
  return CreateCudaBackend({.copy_gather_blocks = args.gather_blocks});
}

absl::Status Run(const Args& args) {
  PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> backend, MakeBackend(args));
  PULSE_ASSIGN_OR_RETURN(Tiers tiers, MakeTiers(*backend, args));
  PULSE_ASSIGN_OR_RETURN(HbmKernel kernel, HbmKernel::Create(*backend, args.hbm_rows));
  Bench bench(*backend, args, kernel);
  PULSE_RETURN_IF_ERROR(bench.Open());
  const size_t plan_bytes = static_cast<size_t>(args.plan_mib) * kMiB;
  std::mt19937_64 rng(4);

  double link[2];
  for (const CopyDirection direction :
       {CopyDirection::kHostToDevice, CopyDirection::kDeviceToHost}) {
    PULSE_ASSIGN_OR_RETURN(link[static_cast<int>(direction)], LinkGbS(bench, tiers, direction));
  }
  const size_t link_bytes = std::min({kGiB, tiers.host[0].bytes(), tiers.device.bytes()});
  std::printf("link (one copy of %zu MiB): host->device %.1f GB/s, device->host %.1f GB/s\n\n",
              link_bytes / kMiB, link[0], link[1]);
  if (args.link_only) {
    for (const CopyDirection direction :
         {CopyDirection::kHostToDevice, CopyDirection::kDeviceToHost}) {
      bench.Write(
          {{"bench", "link"},
           {"direction", direction == CopyDirection::kHostToDevice ? "recall" : "write-back"},
           {"bytes", link_bytes},
           {"gb_s", link[static_cast<int>(direction)]}});
    }
    return absl::OkStatus();
  }
  std::printf("%-10s %-10s %8s %8s %8s %8s %10s %6s\n", "direction", "executor", "chunk", "chunks",
              "GB/s", "of link", "host GB/s", "gated");
  for (const size_t chunk_bytes : kChunkSizes) {
    PULSE_ASSIGN_OR_RETURN(const std::vector<std::vector<CopyChunk>> recalls,
                           Scatters(tiers, chunk_bytes, plan_bytes / chunk_bytes, rng));
    const std::vector<std::vector<CopyChunk>> write_backs = Reversed(recalls);
    for (const CopyDirection direction :
         {CopyDirection::kHostToDevice, CopyDirection::kDeviceToHost}) {
      const double link_gb_s = link[static_cast<int>(direction)];
      for (const CopyExecutor executor : kExecutors) {
        PULSE_ASSIGN_OR_RETURN(
            const Bench::Rate rate,
            bench.Measure(direction == CopyDirection::kHostToDevice ? recalls : write_backs,
                          direction, executor));
        std::printf("%-10s %-10s %8zu %8zu %8.1f %7.0f%% %10.1f %6s\n",
                    DirectionName(direction).c_str(), CopyExecutorName(executor).data(),
                    chunk_bytes, recalls[0].size(), rate.gb_s, 100 * rate.gb_s / link_gb_s,
                    rate.host_gb_s, rate.gated ? "yes" : "no");
        bench.Write({{"bench", "recall"},
                     {"executor", std::string(CopyExecutorName(executor))},
                     {"direction", DirectionName(direction)},
                     {"chunk_bytes", chunk_bytes},
                     {"chunks", recalls[0].size()},
                     {"gather_blocks", args.gather_blocks},
                     {"gb_s", rate.gb_s},
                     {"link_gb_s", link_gb_s},
                     {"host_gb_s", rate.host_gb_s},
                     {"gated", rate.gated},
                     {"runs", args.runs}});
      }
    }
  }
  PULSE_RETURN_IF_ERROR(BenchCodecs(bench, tiers, args, plan_bytes, link, rng));
  return BenchInterference(*backend, bench, kernel, tiers, args, plan_bytes, rng);
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-recall-bench", pulse::kUsage, pulse::ParseArgs(argc, argv),
                        &pulse::Run);
}
