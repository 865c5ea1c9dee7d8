// Google Benchmark of block selection on the host at Llama-3.1-8B's shape (32 query heads over 8
// KV heads of 128 dims, 32-token blocks), one sequence of 16384 tokens and a budget of 2048
// (sinks 32, window 128): about 507 candidates (not part of ctest):
//   build/bin/block_selector_bench [--benchmark_filter=...]
// Select: from every query head's bounds (the head aggregate on the host, then the ranking);
// SelectScored: from the per-set scores a backend's AggregateScores gives (the ranking alone).
// One iteration is one (sequence, layer) of a decode step.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/offload/selection.h"

namespace pulse {
namespace {

constexpr int32_t kQueryHeads = 32;
constexpr int32_t kTokens = 16384;

BlockSelector MakeSelector(SelectionMode mode) {
  const PagedKvLayout layout{.block_tokens = 32, .num_kv_heads = 8, .head_dim = 128};
  return *BlockSelector::Create(layout, kQueryHeads, {.mode = mode, .budget_tokens = 2048});
}

std::vector<float> RandomValues(size_t count, float scale) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(0.0f, scale);
  std::vector<float> values(count);
  for (float& value : values) value = dist(rng);
  return values;
}

SelectionMode Mode(const benchmark::State& state) {
  return state.range(0) == 0 ? SelectionMode::kSoloHead : SelectionMode::kHeadWise;
}

void BM_SelectFromBounds(benchmark::State& state) {
  const BlockSelector selector = MakeSelector(Mode(state));
  const auto candidates = static_cast<size_t>(selector.Partition(kTokens)->num_candidates());
  const std::vector<float> bounds = RandomValues(kQueryHeads * candidates, 10.0f);
  for (auto _ : state) benchmark::DoNotOptimize(selector.Select(kTokens, bounds));
  state.SetLabel(state.range(0) == 0 ? "solohead" : "headwise");
}
BENCHMARK(BM_SelectFromBounds)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_SelectScored(benchmark::State& state) {
  const BlockSelector selector = MakeSelector(Mode(state));
  const auto candidates = static_cast<size_t>(selector.Partition(kTokens)->num_candidates());
  const std::vector<float> scores =
      RandomValues(static_cast<size_t>(selector.num_sets()) * candidates, 1.0f);
  for (auto _ : state) benchmark::DoNotOptimize(selector.SelectScored(kTokens, scores));
  state.SetLabel(state.range(0) == 0 ? "solohead" : "headwise");
}
BENCHMARK(BM_SelectScored)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pulse

BENCHMARK_MAIN();
