// pulse-cuda-op-bench: the CUDA backend's ops one at a time at Llama-3.1-8B shapes, against the
// floors they are bounded by (bytes over HBM bandwidth, or FLOPs over the bf16 tensor peak).
//
//   pulse-cuda-op-bench [--out FILE.jsonl] [--hbm-gb-s 4250] [--peak-tflops 790]
//       [--decode-blocks-per-sm 4,8] [--only sparse-step] [--block-tokens 8,4]
//
// Each op runs a few times to warm up, then `reps` times back to back between two stream syncs;
// the time is the host clock over the reps divided by reps (launch gaps included: those are part
// of a step too). Weights rotate among enough copies that no op reads from the 60 MB L2.
// Prints a table and writes one JSON record an op. Decode-sized GEMMs run twice: with cuBLASLt's
// heuristic's first algorithm (the default) and with the fastest of its candidates
// (CudaBackendOptions::gemm_tune_max_rows). With
// --decode-blocks-per-sm, decode attention runs again at each value of
// CudaBackendOptions::decode_blocks_per_sm (how finely it splits the sequence), each on a backend
// of its own. --only sparse-step times the sparse step's ops alone (selection and sparse
// attention); --block-tokens times them at each block size (8 by default).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/backend/bf16.h"
#include "core/backend/block_estimator.h"
#include "core/backend/block_scores.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/backend/sparse_tables.h"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

constexpr std::string_view kUsage =
    "usage: pulse-cuda-op-bench [--out FILE.jsonl] [--hbm-gb-s 4250] [--peak-tflops 790] "
    "[--decode-blocks-per-sm 4,8] [--only sparse-step] [--block-tokens 8,4]";
constexpr size_t kL2Bytes = size_t{60} << 20;

struct Args {
  std::string out;
  double hbm_gb_s = 4250;
  double peak_tflops = 790;
  std::vector<int32_t> decode_blocks_per_sm;
  bool only_sparse_step = false;
  std::vector<int32_t> block_tokens = {8};
};

// `text` as comma-separated integers into `values`; false if one is not an integer.
bool ParseIntList(const std::string& text, std::vector<int32_t>& values) {
  values.clear();
  for (const absl::string_view item : absl::StrSplit(text, ',')) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(item, &value)) return false;
    values.push_back(value);
  }
  return true;
}

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    bool ok = true;
    if (flag == "--out") {
      args.out = value;
    } else if (flag == "--hbm-gb-s") {
      ok = absl::SimpleAtod(value, &args.hbm_gb_s);
    } else if (flag == "--peak-tflops") {
      ok = absl::SimpleAtod(value, &args.peak_tflops);
    } else if (flag == "--decode-blocks-per-sm") {
      ok = ParseIntList(value, args.decode_blocks_per_sm);
    } else if (flag == "--block-tokens") {
      ok = ParseIntList(value, args.block_tokens) &&
           std::all_of(args.block_tokens.begin(), args.block_tokens.end(),
                       [](int32_t tokens) { return tokens == 4 || tokens == 8 || tokens == 16; });
    } else if (flag == "--only") {
      ok = value == "sparse-step";
      args.only_sparse_step = ok;
    } else {
      return absl::InvalidArgumentError("unknown flag " + flag);
    }
    if (!ok) return absl::InvalidArgumentError("bad value for " + flag);
  }
  if (argc % 2 == 0) return absl::InvalidArgumentError("a flag needs a value");
  return args;
}

class Bench {
 public:
  Bench(Backend& backend, const Args& args) : backend_(&backend), args_(args) {
    if (!args.out.empty()) out_ = std::fopen(args.out.c_str(), "w");
    std::printf("%-34s %10s %10s %8s\n", "op", "us", "rate", "of floor");
  }
  ~Bench() {
    if (out_ != nullptr) std::fclose(out_);
  }

  // Later buffers and timings use `backend`, which must outlive them and this bench.
  void UseBackend(Backend& backend) { backend_ = &backend; }

  // A device buffer of `count` random bf16 (or fp32) values in [-1, 1).
  absl::StatusOr<DeviceBuffer> Random(size_t count, bool bf16, uint32_t seed) {
    const size_t element = bf16 ? 2 : 4;
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer buffer, backend_->Allocate(count * element));
    // One random 16 MiB pattern, copied over the buffer (values only need not be zeros).
    const size_t pattern = std::min<size_t>(count, size_t{8} << 20);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> halves(bf16 ? pattern : 0);
    std::vector<float> floats(bf16 ? 0 : pattern);
    for (size_t i = 0; i < pattern; ++i) {
      if (bf16) {
        halves[i] = F32ToBf16(dist(rng));
      } else {
        floats[i] = dist(rng);
      }
    }
    const void* source = bf16 ? static_cast<const void*>(halves.data()) : floats.data();
    for (size_t done = 0; done < count; done += pattern) {
      const size_t n = std::min(pattern, count - done);
      backend_->CopyToDevice(static_cast<char*>(buffer.data()) + done * element, source,
                             n * element);
    }
    PULSE_RETURN_IF_ERROR(backend_->Synchronize());
    return buffer;
  }

  absl::StatusOr<DeviceBuffer> Ints(const std::vector<int32_t>& values) {
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer buffer, backend_->Allocate(values.size() * 4));
    backend_->CopyToDevice(buffer.data(), values.data(), values.size() * 4);
    return buffer;
  }

  // Times run(rep) and reports it against `bytes` (a bandwidth floor) or `flops` (a compute
  // floor; bytes 0).
  absl::Status Time(const std::string& name, double bytes, double flops,
                    const std::function<void(int)>& run, int reps = 50) {
    for (int i = 0; i < 3; ++i) run(i);
    PULSE_RETURN_IF_ERROR(backend_->Synchronize());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) run(i);
    PULSE_RETURN_IF_ERROR(backend_->Synchronize());
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        reps;
    const double floor_us =
        flops > 0 ? flops / (args_.peak_tflops * 1e12) * 1e6 : bytes / (args_.hbm_gb_s * 1e9) * 1e6;
    const std::string rate = flops > 0 ? absl::StrFormat("%.0f TF/s", flops / us / 1e6)
                                       : absl::StrFormat("%.0f GB/s", bytes / us / 1e3);
    std::printf("%-34s %10.1f %10s %7.0f%%\n", name.c_str(), us, rate.c_str(), 100 * floor_us / us);
    if (out_ != nullptr) {
      std::fprintf(out_,
                   "{\"bench\": \"op\", \"op\": \"%s\", \"us\": %.3f, \"bytes\": %.6g, "
                   "\"flops\": %.6g, \"floor_us\": %.3f, \"floor_fraction\": %.4f}\n",
                   name.c_str(), us, bytes, flops, floor_us, floor_us / us);
    }
    return absl::OkStatus();
  }

 private:
  Backend* backend_;
  const Args& args_;
  FILE* out_ = nullptr;
};

// Llama-3.1-8B.
constexpr int64_t kHidden = 4096;
constexpr int64_t kInter = 14336;
constexpr int32_t kHeads = 32;
constexpr int32_t kKvHeads = 8;
constexpr int32_t kHeadDim = 128;
constexpr int64_t kVocab = 128256;
constexpr int64_t kQkv = (int64_t{kHeads} + int64_t{2} * kKvHeads) * kHeadDim;

// `suffix` ends each op's name.
absl::Status BenchGemms(Backend& backend, Bench& bench, int64_t m, const std::string& suffix = "") {
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  for (const Shape& shape :
       {Shape{"qkv", kQkv, kHidden}, Shape{"o", kHidden, int64_t{kHeads} * kHeadDim},
        Shape{"gate_up", 2 * kInter, kHidden}, Shape{"down", kHidden, kInter},
        Shape{"lm_head", kVocab, kHidden}}) {
    const size_t weight_bytes = static_cast<size_t>(shape.n * shape.k) * 2;
    const int copies = static_cast<int>(std::min<size_t>(8, 4 * kL2Bytes / weight_bytes + 1));
    std::vector<DeviceBuffer> weights;
    for (int c = 0; c < copies; ++c) {
      PULSE_ASSIGN_OR_RETURN(DeviceBuffer w, bench.Random(shape.n * shape.k, true, 10 + c));
      weights.push_back(std::move(w));
    }
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer x, bench.Random(m * shape.k, true, 1));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer y, backend.Allocate(m * shape.n * 4));
    const auto run = [&](int rep) {
      const MatrixView w{weights[rep % copies].data(), DType::kBF16, shape.n, shape.k};
      backend.Gemm(x.data(), m, w, nullptr, y.as<float>());
    };
    const std::string name = absl::StrFormat("gemm %s m=%d%s", shape.name, m, suffix);
    if (m <= 64) {
      PULSE_RETURN_IF_ERROR(
          bench.Time(name, weight_bytes + m * shape.k * 2 + m * shape.n * 4, 0, run));
    } else {
      PULSE_RETURN_IF_ERROR(bench.Time(name, 0, 2.0 * m * shape.n * shape.k, run, 10));
    }
  }
  return absl::OkStatus();
}

absl::Status BenchPointwise(Backend& backend, Bench& bench, int64_t m) {
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer x, bench.Random(m * kHidden, false, 2));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer residual, bench.Random(m * kHidden, false, 3));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer weight, bench.Random(kHidden, false, 4));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer y, backend.Allocate(m * kHidden * 2));
  PULSE_RETURN_IF_ERROR(
      bench.Time(absl::StrFormat("add_rms_norm m=%d", m), m * kHidden * 14.0, 0, [&](int) {
        backend.AddRmsNorm(residual.as<float>(), x.as<float>(), weight.as<float>(), m, kHidden,
                           1e-5f, y.data());
      }));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer qkv, bench.Random(m * kQkv, false, 5));
  std::vector<int32_t> position_values(m, 4000);
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer positions, bench.Ints(position_values));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer inv_freq, bench.Random(kHeadDim / 2, false, 6));
  PULSE_RETURN_IF_ERROR(bench.Time(
      absl::StrFormat("rope q+k m=%d", m), m * (kHeads + kKvHeads) * kHeadDim * 8.0, 0, [&](int) {
        backend.Rope(qkv.as<float>(), m, kQkv, kHeads + kKvHeads, kHeadDim, positions.as<int32_t>(),
                     inv_freq.as<float>());
      }));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer gate_up, bench.Random(m * 2 * kInter, false, 7));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer act, backend.Allocate(m * kInter * 2));
  PULSE_RETURN_IF_ERROR(
      bench.Time(absl::StrFormat("swiglu m=%d", m), m * kInter * 10.0, 0,
                 [&](int) { backend.SwiGlu(gate_up.as<float>(), m, kInter, act.data()); }));
  return absl::OkStatus();
}

// A paged cache of `seqs` sequences of `context` tokens each, blocks in a shuffled order (or in
// order: one contiguous stretch a sequence).
struct Cache {
  DeviceBuffer blocks, tables, lens, offsets;
  PagedKvBatch batch;
};

absl::StatusOr<Cache> MakeCache(Bench& bench, int32_t seqs, int32_t context, int32_t q_len,
                                bool shuffle = true, int32_t block_tokens = 32) {
  const PagedKvLayout layout{.block_tokens = block_tokens,
                             .num_kv_heads = kKvHeads,
                             .head_dim = kHeadDim,
                             .type = DType::kBF16};
  const int32_t per_seq = (context + block_tokens - 1) / block_tokens;
  std::vector<int32_t> tables(static_cast<size_t>(seqs) * per_seq);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
  if (shuffle) std::shuffle(tables.begin(), tables.end(), std::mt19937(7));
  std::vector<int32_t> offsets(seqs + 1);
  for (int32_t s = 0; s <= seqs; ++s) offsets[s] = s * q_len;
  Cache cache;
  PULSE_ASSIGN_OR_RETURN(cache.blocks, bench.Random(tables.size() * layout.block_elems(), true, 8));
  PULSE_ASSIGN_OR_RETURN(cache.tables, bench.Ints(tables));
  PULSE_ASSIGN_OR_RETURN(cache.lens, bench.Ints(std::vector<int32_t>(seqs, context)));
  PULSE_ASSIGN_OR_RETURN(cache.offsets, bench.Ints(offsets));
  cache.batch = {.blocks = cache.blocks.data(),
                 .layout = layout,
                 .num_seqs = seqs,
                 .max_blocks_per_seq = per_seq,
                 .block_tables = cache.tables.as<int32_t>(),
                 .kv_lens = cache.lens.as<int32_t>(),
                 .q_offsets = cache.offsets.as<int32_t>(),
                 .num_rows = seqs * q_len,
                 .max_q_len = q_len,
                 .max_kv_len = context};
  return cache;
}

// Decode attention at the benchmark's four shapes; `suffix` ends each op's name.
absl::Status BenchDecodeAttention(Backend& backend, Bench& bench, const std::string& suffix) {
  const float scale = 1.0f / std::sqrt(float{kHeadDim});
  for (const auto& [seqs, context] :
       {std::pair{1, 4096}, std::pair{8, 16384}, std::pair{32, 8192}, std::pair{16, 32768}}) {
    PULSE_ASSIGN_OR_RETURN(Cache cache, MakeCache(bench, seqs, context, 1));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer q, bench.Random(seqs * kQkv, false, 9));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer out,
                           backend.Allocate(int64_t{seqs} * kHeads * kHeadDim * 2));
    const double kv_bytes = static_cast<double>(seqs) * context * kKvHeads * kHeadDim * 2 * 2;
    PULSE_RETURN_IF_ERROR(bench.Time(
        absl::StrFormat("decode attention %dx%d%s", seqs, context, suffix), kv_bytes, 0, [&](int) {
          backend.Attention(q.as<float>(), kQkv, kHeads, cache.batch, scale, out.data());
        }));
  }
  return absl::OkStatus();
}

// The fused RoPE + KV append of a decode step (8 sequences) and of a prompt chunk (8192 rows).
absl::Status BenchRopeAppend(Backend& backend, Bench& bench) {
  for (const auto& [seqs, q_len] : {std::pair{8, 1}, std::pair{1, 8192}}) {
    const int64_t rows = int64_t{seqs} * q_len;
    PULSE_ASSIGN_OR_RETURN(Cache cache, MakeCache(bench, seqs, 16384, q_len));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer qkv, bench.Random(rows * kQkv, false, 5));
    std::vector<int32_t> position_values(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      position_values[r] = static_cast<int32_t>(16384 - q_len + r % q_len);
    }
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer positions, bench.Ints(position_values));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer inv_freq, bench.Random(kHeadDim / 2, false, 6));
    // Reads the row's q, k and v, writes the rotated q and k back and k and v as bf16.
    const double bytes =
        static_cast<double>(rows) * kHeadDim *
        ((kHeads + 2.0 * kKvHeads) * 4 + (kHeads + kKvHeads) * 4.0 + 2.0 * kKvHeads * 2);
    PULSE_RETURN_IF_ERROR(bench.Time(absl::StrFormat("rope+append m=%d", rows), bytes, 0, [&](int) {
      backend.RopeAppendKv(qkv.as<float>(), rows, kQkv, kHeads, positions.as<int32_t>(),
                           inv_freq.as<float>(), cache.batch);
    }));
  }
  return absl::OkStatus();
}

absl::Status BenchAttention(Backend& backend, Bench& bench) {
  const float scale = 1.0f / std::sqrt(float{kHeadDim});
  PULSE_RETURN_IF_ERROR(BenchDecodeAttention(backend, bench, ""));
  {
    PULSE_ASSIGN_OR_RETURN(Cache cache, MakeCache(bench, 8, 16384, 1, false));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer q, bench.Random(8 * kQkv, false, 9));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer out, backend.Allocate(int64_t{8} * kHeads * kHeadDim * 2));
    PULSE_RETURN_IF_ERROR(bench.Time("decode attention 8x16384 in order",
                                     8.0 * 16384 * kKvHeads * kHeadDim * 2 * 2, 0, [&](int) {
                                       backend.Attention(q.as<float>(), kQkv, kHeads, cache.batch,
                                                         scale, out.data());
                                     }));
  }
  for (const auto& [q_len, context] : {std::pair{8192, 8192}, std::pair{8192, 32768}}) {
    PULSE_ASSIGN_OR_RETURN(Cache cache, MakeCache(bench, 1, context, q_len));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer q, bench.Random(int64_t{q_len} * kQkv, false, 9));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer out,
                           backend.Allocate(int64_t{q_len} * kHeads * kHeadDim * 2));
    // Causal: row i of the chunk sees context - q_len + i + 1 keys; QK^T and PV, 2 FLOPs a MAC.
    const double keys = static_cast<double>(q_len) * (context - q_len) +
                        static_cast<double>(q_len) * (q_len + 1) / 2;
    PULSE_RETURN_IF_ERROR(bench.Time(
        absl::StrFormat("prefill attention %d over %d", q_len, context), 0,
        4.0 * kHeads * kHeadDim * keys,
        [&](int) {
          backend.Attention(q.as<float>(), kQkv, kHeads, cache.batch, scale, out.data());
        },
        5));
  }
  return absl::OkStatus();
}

// One layer's selection and sparse attention in a SoloHead decode step of `rows` requests of
// `context` tokens at a budget of 2048 with `block_tokens`-token blocks, every key scored from its
// int4 copy, one block of sink and four of window tokens: score every block's summary against
// the step's query rows, aggregate the 32 heads' bounds into a score a block, pick each row's
// budget's worth of best blocks, build the tables of offloaded rows whose blocks are all resident
// (every pick a hit), and attend over each row's picked blocks, scattered in the cache.
absl::Status BenchSparseStep(Backend& backend, Bench& bench, int32_t rows, int32_t context,
                             int32_t block_tokens) {
  constexpr int32_t kBudget = 2048;
  constexpr int32_t kSinkBlocks = 1;
  constexpr int32_t kWindowBlocks = 4;
  const int32_t picks = kBudget / block_tokens;
  const int32_t candidates = context / block_tokens;
  const int32_t count = rows * candidates;
  const PagedKvLayout layout{.block_tokens = block_tokens,
                             .num_kv_heads = kKvHeads,
                             .head_dim = kHeadDim,
                             .type = DType::kBF16};
  const BlockEstimator estimator =
      ForBlocks({.boxes = 0, .radius = 0.0f, .precision = SummaryPrecision::kInt4}, block_tokens);
  const int64_t summary_bytes = SummaryBytes(layout, estimator);
  // Summaries of random keys (SummarizeBlocks), so the scales are real ones.
  PULSE_ASSIGN_OR_RETURN(Cache keys, MakeCache(bench, rows, context, 1, true, block_tokens));
  std::vector<int32_t> ids(count);
  std::iota(ids.begin(), ids.end(), 0);
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer block_ids, bench.Ints(ids));
  std::shuffle(ids.begin(), ids.end(), std::mt19937(12));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer summary_ids, bench.Ints(ids));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer summaries, backend.Allocate(count * summary_bytes));
  backend.SummarizeBlocks(keys.blocks.data(), layout, estimator, block_ids.as<int32_t>(),
                          summary_ids.as<int32_t>(), count, summaries.data());
  std::vector<int32_t> query_row_values(count);
  for (int32_t i = 0; i < count; ++i) query_row_values[i] = i / candidates;
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer query_rows, bench.Ints(query_row_values));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer q, bench.Random(rows * kQkv, false, 13));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer bounds, backend.Allocate(int64_t{kHeads} * count * 4));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer scores, backend.Allocate(int64_t{count} * 4));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer picked, backend.Allocate(int64_t{rows} * picks * 4));
  std::vector<ScoreSegment> segment_values;
  std::vector<SparseTableRow> row_values;
  for (int32_t r = 0; r < rows; ++r) {
    segment_values.push_back({.first = r * candidates,
                              .count = candidates,
                              .num_sets = 1,
                              .aggregate = HeadAggregate::kSoftmaxSum,
                              .logit_scale = 1.0f / std::sqrt(float{kHeadDim}),
                              .scores_first = r * candidates,
                              .picks = picks,
                              .picks_first = r * picks});
    row_values.push_back({.segment = r,
                          .fixed_first = r * (kSinkBlocks + kWindowBlocks),
                          .sink_blocks = kSinkBlocks,
                          .window_blocks = kWindowBlocks,
                          .kv_len = (kSinkBlocks + picks + kWindowBlocks) * block_tokens,
                          .offloaded = 1,
                          .picks_before = r * picks});
  }
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer segments,
                         backend.Allocate(segment_values.size() * sizeof(ScoreSegment)));
  backend.CopyToDevice(segments.data(), segment_values.data(),
                       segment_values.size() * sizeof(ScoreSegment));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer table_rows,
                         backend.Allocate(row_values.size() * sizeof(SparseTableRow)));
  backend.CopyToDevice(table_rows.data(), row_values.data(),
                       row_values.size() * sizeof(SparseTableRow));
  // The directory of an all-resident device tier: candidate i is host block i, in slot i.
  std::vector<int32_t> identity(count);
  std::iota(identity.begin(), identity.end(), 0);
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer slot_of_block, bench.Ints(identity));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer block_of_slot, bench.Ints(identity));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer candidate_blocks, bench.Ints(identity));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer last_used, bench.Ints(std::vector<int32_t>(count, 0)));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer slot_scores,
                         bench.Ints(std::vector<int32_t>(2 * size_t(count), 0)));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer pick_stamps, bench.Ints(std::vector<int32_t>(count, 0)));
  PULSE_ASSIGN_OR_RETURN(
      DeviceBuffer fixed_blocks,
      bench.Ints(std::vector<int32_t>(size_t(rows) * (kSinkBlocks + kWindowBlocks), 0)));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer step, bench.Ints({1}));
  const int32_t table_stride = kSinkBlocks + picks + kWindowBlocks;
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer tables, backend.Allocate(int64_t{rows} * table_stride * 4));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer kv_lens, backend.Allocate(int64_t{rows} * 4));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer recall_entries,
                         backend.Allocate(int64_t{count} * sizeof(RecallEntry)));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer recall_counts, backend.Allocate(4));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer counters,
                         bench.Ints(std::vector<int32_t>(size_t(rows) * kSparseCounters * 2, 0)));
  const SparseTableBuild build{.segments = segments.as<ScoreSegment>(),
                               .rows = table_rows.as<SparseTableRow>(),
                               .num_rows = rows,
                               .num_sets = 1,
                               .picked = picked.as<int32_t>(),
                               .scores = scores.as<float>(),
                               .candidate_blocks = candidate_blocks.as<int32_t>(),
                               .summary_ids = summary_ids.as<int32_t>(),
                               .fixed_blocks = fixed_blocks.as<int32_t>(),
                               .step = step.as<int32_t>(),
                               .pick_stamps = pick_stamps.as<int32_t>(),
                               .num_summaries = count,
                               .directory = {.num_sets = 1,
                                             .num_slots = count,
                                             .num_blocks = count,
                                             .first_slot = 0,
                                             .score_aware = 1,
                                             .slot_of_block = slot_of_block.as<int32_t>(),
                                             .block_of_slot = block_of_slot.as<int32_t>(),
                                             .last_used = last_used.as<int32_t>(),
                                             .score = slot_scores.as<uint64_t>()},
                               .tables = tables.as<int32_t>(),
                               .table_stride = table_stride,
                               .kv_lens = kv_lens.as<int32_t>(),
                               .recalls = {.entries = recall_entries.as<RecallEntry>(),
                                           .counts = recall_counts.as<int32_t>(),
                                           .capacity = count},
                               .counters = reinterpret_cast<int64_t*>(counters.data())};
  PULSE_RETURN_IF_ERROR(backend.Synchronize());

  const double summary_read = static_cast<double>(count) * static_cast<double>(summary_bytes);
  const double bounds_bytes = static_cast<double>(kHeads) * count * 4;
  const double pick_bytes = static_cast<double>(rows) * picks * 4;
  // A pick's reads and writes: its index, summary id, stamp, block, score, slot, table entry
  // and the slot's stamp and score.
  const double table_bytes = pick_bytes * 10;
  const auto score = [&] {
    backend.ScoreBlocks(q.as<float>(), kQkv, kHeads, layout, estimator, summaries.data(),
                        summary_ids.as<int32_t>(), query_rows.as<int32_t>(), count,
                        bounds.as<float>());
  };
  const auto aggregate = [&] {
    backend.AggregateScores(bounds.as<float>(), kHeads, count, segments.as<ScoreSegment>(), rows, 1,
                            scores.as<float>());
  };
  const auto select = [&] {
    backend.SelectTopBlocks(scores.as<float>(), segments.as<ScoreSegment>(), rows, 1,
                            picked.as<int32_t>());
  };
  const auto build_tables = [&] { backend.BuildSparseTables(build); };
  const std::string shape =
      absl::StrFormat("%dx%d budget %d block %d", rows, context, kBudget, block_tokens);
  PULSE_RETURN_IF_ERROR(bench.Time("score int4 tokens " + shape,
                                   summary_read + count * 8.0 + bounds_bytes, 0,
                                   [&](int) { score(); }));
  PULSE_RETURN_IF_ERROR(bench.Time("aggregate solohead " + shape, bounds_bytes + count * 4.0, 0,
                                   [&](int) { aggregate(); }));
  PULSE_RETURN_IF_ERROR(bench.Time("top-k " + shape, count * 4.0, 0, [&](int) { select(); }));
  PULSE_RETURN_IF_ERROR(
      bench.Time("build tables, all hits " + shape, table_bytes, 0, [&](int) { build_tables(); }));
  PULSE_RETURN_IF_ERROR(bench.Time("selection (all four) " + shape,
                                   summary_read + count * 12.0 + 2 * bounds_bytes + table_bytes, 0,
                                   [&](int) {
                                     score();
                                     aggregate();
                                     select();
                                     build_tables();
                                   }));

  // A few misses a step among all the context's slots: every 512th block forgotten before each
  // build (the forgetting timed alone too), so the victims are chosen over every slot.
  std::vector<int32_t> forgotten;
  for (int32_t i = 0; i < count; i += 512) forgotten.push_back(i);
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer forget_blocks, bench.Ints(forgotten));
  const auto forget = [&] {
    backend.ForgetSlots(build.directory, forget_blocks.as<int32_t>(),
                        static_cast<int32_t>(forgotten.size()));
  };
  PULSE_RETURN_IF_ERROR(bench.Time("forget 1/512 of the slots " + shape, forgotten.size() * 16.0, 0,
                                   [&](int) { forget(); }));
  PULSE_RETURN_IF_ERROR(
      bench.Time("the same, then build tables " + shape, table_bytes, 0, [&](int) {
        forget();
        build_tables();
      }));

  // The picked blocks, as sparse tables give them to attention: a row's picks, blocks of its own,
  // scattered over the cache.
  PULSE_ASSIGN_OR_RETURN(Cache picked_kv, MakeCache(bench, rows, kBudget, 1, true, block_tokens));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer out, backend.Allocate(int64_t{rows} * kHeads * kHeadDim * 2));
  const double kv_bytes = static_cast<double>(rows) * kBudget * kKvHeads * kHeadDim * 2 * 2;
  return bench.Time("sparse attention " + shape, kv_bytes, 0, [&](int) {
    backend.Attention(q.as<float>(), kQkv, kHeads, picked_kv.batch,
                      1.0f / std::sqrt(float{kHeadDim}), out.data());
  });
}

// The sparse step's ops at the offloaded benchmarks' shapes: the step bench's two and the
// throughput grid's 16 x 32768.
absl::Status BenchSparseSteps(Backend& backend, Bench& bench, std::span<const int32_t> sizes) {
  for (const int32_t block_tokens : sizes) {
    PULSE_RETURN_IF_ERROR(BenchSparseStep(backend, bench, 8, 16384, block_tokens));
    PULSE_RETURN_IF_ERROR(BenchSparseStep(backend, bench, 32, 8192, block_tokens));
    PULSE_RETURN_IF_ERROR(BenchSparseStep(backend, bench, 16, 32768, block_tokens));
  }
  return absl::OkStatus();
}

absl::Status BenchSampling(Backend& backend, Bench& bench) {
  constexpr int64_t kRows = 8;
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer logits, bench.Random(kRows * kVocab, false, 11));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer history, bench.Ints({0}));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer tokens, backend.Allocate(kRows * 4));
  PULSE_ASSIGN_OR_RETURN(DeviceBuffer params, backend.Allocate(kRows * sizeof(TokenSampling)));
  for (const auto& [name, sampling] :
       {std::pair{"sample greedy 8 rows", TokenSampling{}},
        std::pair{"sample top-p 0.9 8 rows",
                  TokenSampling{.temperature = 0.8f, .top_p = 0.9f, .uniform = 0.5}},
        std::pair{"sample top-k 50 8 rows",
                  TokenSampling{.temperature = 0.8f, .top_k = 50, .uniform = 0.5}}}) {
    const std::vector<TokenSampling> rows(kRows, sampling);
    backend.CopyToDevice(params.data(), rows.data(), rows.size() * sizeof(TokenSampling));
    PULSE_RETURN_IF_ERROR(bench.Time(name, kRows * kVocab * 4.0, 0, [&](int) {
      backend.SampleTokens(logits.as<float>(), kRows, kVocab, params.as<TokenSampling>(),
                           history.as<int32_t>(), tokens.as<int32_t>());
    }));
  }
  return absl::OkStatus();
}

absl::Status Run(const Args& args) {
  PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> backend, CreateCudaBackend({}));
  Bench bench(*backend, args);
  if (args.only_sparse_step) return BenchSparseSteps(*backend, bench, args.block_tokens);
  for (const int64_t m : {1, 8, 32}) PULSE_RETURN_IF_ERROR(BenchGemms(*backend, bench, m));
  {
    // The same GEMMs with the fastest of cuBLASLt's candidates, timed on first use.
    PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> tuned,
                           CreateCudaBackend({.gemm_tune_max_rows = 64}));
    bench.UseBackend(*tuned);
    for (const int64_t m : {1, 8, 32}) {
      PULSE_RETURN_IF_ERROR(BenchGemms(*tuned, bench, m, " (tuned)"));
    }
    bench.UseBackend(*backend);
  }
  for (const int64_t m : {8, 8192}) PULSE_RETURN_IF_ERROR(BenchPointwise(*backend, bench, m));
  PULSE_RETURN_IF_ERROR(BenchRopeAppend(*backend, bench));
  PULSE_RETURN_IF_ERROR(BenchAttention(*backend, bench));
  PULSE_RETURN_IF_ERROR(BenchSparseSteps(*backend, bench, args.block_tokens));
  PULSE_RETURN_IF_ERROR(BenchSampling(*backend, bench));
  PULSE_RETURN_IF_ERROR(BenchGemms(*backend, bench, 8192));
  for (const int32_t blocks_per_sm : args.decode_blocks_per_sm) {
    PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> tuned,
                           CreateCudaBackend({.decode_blocks_per_sm = blocks_per_sm}));
    bench.UseBackend(*tuned);
    PULSE_RETURN_IF_ERROR(
        BenchDecodeAttention(*tuned, bench, absl::StrFormat(" (%d blocks/SM)", blocks_per_sm)));
    bench.UseBackend(*backend);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-cuda-op-bench", pulse::kUsage, pulse::ParseArgs(argc, argv),
                        &pulse::Run);
}
