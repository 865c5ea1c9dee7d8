// Google Benchmark of the device block cache's bookkeeping on the host (not part of ctest):
//   build/bin/device_slot_cache_bench
// One iteration is one layer of a decode step of 8 requests at Llama-3.1-8B's offload shape
// (16384 tokens in 32-token blocks, a budget of 2048: 58 picks of 507 candidates a request and
// set), the picks random every step: each pick is looked up, acquired on a miss and scored, then
// the step ends. Arg: 1 set (SoloHead) or 8 (HeadWise, one cache a KV head); the slots are the
// budget's worth.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/kv/device_slot_cache.h"

namespace pulse {
namespace {

constexpr int32_t kRequests = 8;
constexpr int32_t kCandidates = 507;
constexpr int32_t kPicks = 58;
constexpr int32_t kSlotsPerRequest = 64;

void BM_LayerStep(benchmark::State& state) {
  const auto sets = static_cast<int32_t>(state.range(0));
  std::vector<DeviceSlotCache> caches;
  for (int32_t set = 0; set < sets; ++set) {
    caches.emplace_back(kRequests * kSlotsPerRequest, std::make_unique<ScoreAwareEviction>());
  }
  std::mt19937 rng(1);
  std::vector<int32_t> candidates(kCandidates);
  std::iota(candidates.begin(), candidates.end(), 0);
  std::uniform_real_distribution<float> score(0.0f, 1.0f);
  for (auto _ : state) {
    for (int32_t set = 0; set < sets; ++set) {
      DeviceSlotCache& cache = caches[static_cast<size_t>(set)];
      for (int32_t request = 0; request < kRequests; ++request) {
        std::shuffle(candidates.begin(), candidates.end(), rng);
        for (int32_t i = 0; i < kPicks; ++i) {
          const int32_t block = request * kCandidates + candidates[static_cast<size_t>(i)];
          if (!cache.Lookup(block, request).has_value()) {
            benchmark::DoNotOptimize(cache.Acquire(block, request));
          }
          cache.NoteScore(block, score(rng));
        }
      }
      cache.EndStep();
    }
  }
  state.SetLabel(sets == 1 ? "solohead" : "headwise");
}
BENCHMARK(BM_LayerStep)->Arg(1)->Arg(8)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pulse

BENCHMARK_MAIN();
