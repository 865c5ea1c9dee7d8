// Google Benchmark of the CPU backend's Gemm, attention and block scoring at SmolLM2-135M shapes
// (not part of ctest):
//   build-cpu/bin/cpu_ops_bench [--benchmark_filter=...]
// Counters: weight_bytes/s (the weight matrix streamed once per call) and FLOP/s (2*m*n*k); f32,
// bf16 and the block types the CPU backend keeps (random blocks). GemmBlocks compares the block
// types, K-quants included, at shapes whose rows are whole 256-value super-blocks (SmolLM2's down
// projection, and a 2048-wide square of a 1B model), decode- and prefill-shaped.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/backend/block_estimator.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/base/thread_pool.h"
#include "tests/unit/backend/random_blocks.h"

namespace pulse {
namespace {

struct Shape {
  const char* name;
  int64_t n;
  int64_t k;
};

constexpr Shape kShapes[] = {{"qkv", 960, 576},
                             {"o", 576, 576},
                             {"gate_up", 3072, 576},
                             {"down", 576, 1536},
                             {"lm_head", 49152, 576}};
// 30 layers of qkv, o, gate_up and down plus the lm_head, in bf16.
constexpr size_t kModelWeightBytes =
    2 * (30 * (960 * 576 + 576 * 576 + 3072 * 576 + 576 * 1536) + 49152 * 576);

std::vector<float> RandomValues(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

// A [rows][cols] weight of `type`: random values, or random blocks of a block type.
Weight RandomWeight(Backend& backend, DType type, int64_t rows, int64_t cols, uint32_t seed) {
  if (IsBlockType(type))
    return *backend.UploadBlocks(testing::RandomBlocks(type, rows, cols, seed, false), rows, cols,
                                 type);
  return *backend.UploadWeight(RandomValues(rows * cols, seed), rows, cols, type);
}

double WeightBytes(const Weight& w) {
  return IsBlockType(w.type)
             ? double(w.rows) * w.cols / BlockTypeValues(w.type) * BlockTypeBytes(w.type)
             : double(w.rows) * w.cols * DTypeBytes(w.type);
}

Backend& SharedBackend() {
  static const std::shared_ptr<Backend> backend = *CreateCpuBackend({});
  return *backend;
}

void BM_Gemm(benchmark::State& state, Shape shape, DType type) {
  Backend& backend = SharedBackend();
  const int64_t m = state.range(0);
  const Weight w = RandomWeight(backend, type, shape.n, shape.k, 1);
  const std::vector<float> x = RandomValues(m * shape.k, 2);
  std::vector<float> y(m * shape.n);
  for (auto _ : state) {
    backend.Gemm(x.data(), m, w.view(), nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double calls = static_cast<double>(state.iterations());
  state.counters["weight_bytes/s"] =
      benchmark::Counter(calls * WeightBytes(w), benchmark::Counter::kIsRate);
  state.counters["FLOP/s"] =
      benchmark::Counter(calls * 2.0 * m * shape.n * shape.k, benchmark::Counter::kIsRate);
}

// One decode step's weight GEMMs of the 30-layer model plus the lm_head, at m rows.
void BM_ModelStep(benchmark::State& state, DType type) {
  Backend& backend = SharedBackend();
  const int64_t m = state.range(0);
  constexpr int kLayers = 30;
  std::vector<Weight> weights;
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int s = 0; s < 4; ++s) {
      const Shape& shape = kShapes[s];
      weights.push_back(RandomWeight(backend, type, shape.n, shape.k, layer * 4 + s));
    }
  }
  weights.push_back(RandomWeight(backend, type, kShapes[4].n, kShapes[4].k, 999));
  const std::vector<float> x = RandomValues(m * 1536, 2);
  std::vector<float> y(m * 49152);
  double bytes = 0;
  double flops = 0;
  for (const Weight& w : weights) {
    bytes += WeightBytes(w);
    flops += 2.0 * m * w.rows * w.cols;
  }
  for (auto _ : state) {
    for (const Weight& w : weights) backend.Gemm(x.data(), m, w.view(), nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double calls = static_cast<double>(state.iterations());
  state.counters["weight_bytes/s"] = benchmark::Counter(calls * bytes, benchmark::Counter::kIsRate);
  state.counters["FLOP/s"] = benchmark::Counter(calls * flops, benchmark::Counter::kIsRate);
  state.counters["steps/s"] = benchmark::Counter(calls, benchmark::Counter::kIsRate);
}

// The roofline for m = 1: summing a buffer the size of the bf16 model's weights on every thread.
void BM_StreamRead(benchmark::State& state) {
  ThreadPool pool;
  const std::vector<float> data(kModelWeightBytes / sizeof(float), 1.0f);
  std::vector<float> partial(1024);
  for (auto _ : state) {
    pool.ParallelFor(1024, 1, [&](int64_t begin, int64_t end) {
      const int64_t per_range = static_cast<int64_t>(data.size()) / 1024;
      for (int64_t r = begin; r < end; ++r) {
        float lanes[16] = {};
        const float* p = data.data() + r * per_range;
        for (int64_t i = 0; i + 16 <= per_range; i += 16) {
          for (int l = 0; l < 16; ++l) lanes[l] += p[i + l];
        }
        partial[r] = lanes[0];
      }
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kModelWeightBytes, benchmark::Counter::kIsRate);
}

// The cost of one ParallelFor that wakes every thread (an op of a decode step pays it).
void BM_ParallelForOverhead(benchmark::State& state) {
  ThreadPool pool;
  std::vector<int64_t> sink(64);
  for (auto _ : state) {
    pool.ParallelFor(64, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sink[i] += i;
    });
  }
  benchmark::DoNotOptimize(sink.data());
}

// SmolLM2 attention (9 heads, 3 KV heads, head_dim 64) of `rows` queries that end a context of
// `context` tokens, one sequence, over each of its 30 layers' caches in turn (as a step reads
// them: from memory, not from the cache the previous call left warm). FLOP/s counts the q.k and
// p.v products, bytes/s the keys and values read once.
void BM_Attention(benchmark::State& state) {
  Backend& backend = SharedBackend();
  const int32_t rows = static_cast<int32_t>(state.range(0));
  const int32_t context = static_cast<int32_t>(state.range(1));
  constexpr int32_t kHeads = 9;
  constexpr int32_t kLayers = 30;
  const PagedKvLayout layout = {/*block_tokens=*/32, /*num_kv_heads=*/3, /*head_dim=*/64};
  const int32_t num_blocks = (context + layout.block_tokens - 1) / layout.block_tokens;
  std::vector<float> blocks = RandomValues(kLayers * num_blocks * layout.block_elems(), 3);
  std::vector<int32_t> block_table(num_blocks);
  for (int32_t b = 0; b < num_blocks; ++b) block_table[b] = num_blocks - 1 - b;
  const int32_t q_offsets[2] = {0, rows};
  PagedKvBatch kv;
  kv.layout = layout;
  kv.num_seqs = 1;
  kv.max_blocks_per_seq = num_blocks;
  kv.block_tables = block_table.data();
  kv.kv_lens = &context;
  kv.q_offsets = q_offsets;
  kv.num_rows = rows;
  kv.max_q_len = rows;
  kv.max_kv_len = context;
  const std::vector<float> q = RandomValues(rows * kHeads * layout.head_dim, 4);
  std::vector<float> out(q.size());
  int32_t layer = 0;
  for (auto _ : state) {
    kv.blocks = blocks.data() + int64_t{layer} * num_blocks * layout.block_elems();
    backend.Attention(q.data(), kHeads * layout.head_dim, kHeads, kv, 0.125f, out.data());
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % kLayers;
  }
  double keys = 0;  // keys attended, summed over rows
  for (int32_t i = 0; i < rows; ++i) keys += context - rows + i + 1;
  const double iterations = static_cast<double>(state.iterations());
  state.counters["FLOP/s"] = benchmark::Counter(iterations * keys * kHeads * 4 * layout.head_dim,
                                                benchmark::Counter::kIsRate);
  state.counters["bytes/s"] = benchmark::Counter(
      iterations * context * layout.num_kv_heads * 2.0 * layout.head_dim * sizeof(float),
      benchmark::Counter::kIsRate);
}

// SmolLM2 block scoring (9 query heads over 3 KV heads, head_dim 64, every key in int4: the
// default estimator) of one decode row against the candidates of a `context`-token sequence in
// blocks of `block_tokens`, over each of its 30 layers' summaries in turn. MAC/s counts the
// multiply-adds of the boxes' sums (ScoreMultiplyAdds), bytes/s the summaries read once.
void BM_ScoreBlocks(benchmark::State& state) {
  Backend& backend = SharedBackend();
  const auto block_tokens = static_cast<int32_t>(state.range(0));
  const auto context = static_cast<int32_t>(state.range(1));
  constexpr int32_t kHeads = 9;
  constexpr int32_t kLayers = 30;
  const PagedKvLayout layout = {.block_tokens = block_tokens, .num_kv_heads = 3, .head_dim = 64};
  const BlockEstimator estimator = {
      .boxes = block_tokens, .radius = 0.0f, .precision = SummaryPrecision::kInt4};
  const int32_t count = context / block_tokens;
  const auto summaries_a_layer = static_cast<size_t>(count);
  const auto bytes = static_cast<size_t>(SummaryBytes(layout, estimator));
  // Random bytes: int4 values of every kind, and scales drawn as random floats.
  std::vector<std::byte> summaries(kLayers * summaries_a_layer * bytes);
  std::mt19937 rng(5);
  for (std::byte& b : summaries) b = static_cast<std::byte>(rng());
  const SummaryRowLayout rows = SummaryRows(layout, estimator);
  const std::vector<float> scales = RandomValues(kLayers * summaries_a_layer * rows.rows, 6);
  for (size_t s = 0; s < kLayers * summaries_a_layer; ++s) {
    std::memcpy(summaries.data() + s * bytes + rows.scale_offset(0), &scales[s * rows.rows],
                rows.rows * sizeof(float));
  }
  std::vector<int32_t> summary_ids(count);
  for (int32_t i = 0; i < count; ++i) summary_ids[i] = count - 1 - i;
  const std::vector<int32_t> query_rows(count, 0);
  const std::vector<float> q = RandomValues(size_t{kHeads} * layout.head_dim, 7);
  std::vector<float> bounds(kHeads * summaries_a_layer);
  size_t layer = 0;
  for (auto _ : state) {
    backend.ScoreBlocks(q.data(), int64_t{kHeads} * layout.head_dim, kHeads, layout, estimator,
                        summaries.data() + layer * summaries_a_layer * bytes, summary_ids.data(),
                        query_rows.data(), count, bounds.data());
    benchmark::DoNotOptimize(bounds.data());
    layer = (layer + 1) % kLayers;
  }
  const double iterations = static_cast<double>(state.iterations());
  const auto candidates = static_cast<double>(count);
  state.counters["MAC/s"] = benchmark::Counter(
      iterations * candidates * static_cast<double>(ScoreMultiplyAdds(layout, estimator, kHeads)),
      benchmark::Counter::kIsRate);
  state.counters["bytes/s"] = benchmark::Counter(
      iterations * candidates * static_cast<double>(bytes), benchmark::Counter::kIsRate);
}

void RegisterAll() {
  benchmark::RegisterBenchmark("Attention", BM_Attention)
      ->Args({1, 256})
      ->Args({1, 2048})
      ->Args({1, 8192})
      ->Args({256, 256})
      ->Args({256, 2048})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("ScoreBlocks", BM_ScoreBlocks)
      ->Args({8, 2048})
      ->Args({4, 2048})
      ->Args({8, 16384})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("StreamRead", BM_StreamRead)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("ParallelForOverhead", BM_ParallelForOverhead)->UseRealTime();
  for (DType type : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (const Shape& shape : kShapes) {
      benchmark::RegisterBenchmark(
          (std::string("Gemm/") + shape.name + "/" + std::string(DTypeName(type))).c_str(), BM_Gemm,
          shape, type)
          ->Arg(1)
          ->Arg(8)
          ->Arg(256)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark((std::string("ModelStep/") + std::string(DTypeName(type))).c_str(),
                                 BM_ModelStep, type)
        ->Arg(1)
        ->Arg(8)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const Shape& shape : {Shape{"down", 576, 1536}, Shape{"square2048", 2048, 2048}}) {
    for (DType type : {DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K}) {
      benchmark::RegisterBenchmark(
          (std::string("GemmBlocks/") + shape.name + "/" + std::string(DTypeName(type))).c_str(),
          BM_Gemm, shape, type)
          ->Arg(1)
          ->Arg(64)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  pulse::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
