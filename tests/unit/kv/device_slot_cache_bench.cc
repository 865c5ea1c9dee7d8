// Google Benchmark of the device block cache's bookkeeping on the host (not part of ctest):
//   build/bin/device_slot_cache_bench
// One iteration is one layer of a decode step of 8 requests at Llama-3.1-8B's offload shape
// (16384 tokens in 32-token blocks, a budget of 2048: 58 picks of 507 candidates a request and
// set): each pick is looked up, acquired on a miss and scored, then the step ends. Args: 1 set
// (SoloHead) or 8 (HeadWise, one cache a KV head); the percentage of a step's picks that were
// picked the step before (0: random picks, as random weights give; 90: as a trained model's
// queries give); the eviction policy (0: LRU, the engine's default; 1: score-aware). The slots are
// the budget's worth. The picks are drawn before timing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/kv/device_slot_cache.h"

namespace pulse {
namespace {

constexpr int32_t kRequests = 8;
constexpr int32_t kCandidates = 507;
constexpr int32_t kPicks = 58;
constexpr int32_t kSlotsPerRequest = 64;
constexpr int32_t kSteps = 64;  // drawn, then replayed in a loop

// [step][request][pick]: host block ids, request r's in [r * kCandidates, +kCandidates).
std::vector<std::vector<std::vector<int32_t>>> DrawPicks(int32_t reuse_percent, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> candidates(kCandidates);
  std::iota(candidates.begin(), candidates.end(), 0);
  std::vector<std::vector<std::vector<int32_t>>> steps(kSteps);
  for (int32_t step = 0; step < kSteps; ++step) {
    for (int32_t request = 0; request < kRequests; ++request) {
      const int32_t kept = step == 0 ? 0 : kPicks * reuse_percent / 100;
      std::vector<int32_t> picks;
      if (kept > 0) {
        picks = steps[static_cast<size_t>(step - 1)][static_cast<size_t>(request)];
        std::shuffle(picks.begin(), picks.end(), rng);
        picks.resize(static_cast<size_t>(kept));
      }
      std::shuffle(candidates.begin(), candidates.end(), rng);
      for (const int32_t candidate : candidates) {
        if (static_cast<int32_t>(picks.size()) == kPicks) break;
        const int32_t block = request * kCandidates + candidate;
        if (std::find(picks.begin(), picks.end(), block) == picks.end()) picks.push_back(block);
      }
      steps[static_cast<size_t>(step)].push_back(std::move(picks));
    }
  }
  return steps;
}

void BM_LayerStep(benchmark::State& state) {
  const auto sets = static_cast<int32_t>(state.range(0));
  const auto reuse = static_cast<int32_t>(state.range(1));
  const bool lru = state.range(2) == 0;
  std::vector<DeviceSlotCache> caches;
  std::vector<std::vector<std::vector<std::vector<int32_t>>>> picks;
  for (int32_t set = 0; set < sets; ++set) {
    std::unique_ptr<EvictionPolicy> policy;
    if (lru) {
      policy = std::make_unique<LruEviction>();
    } else {
      policy = std::make_unique<ScoreAwareEviction>();
    }
    caches.emplace_back(kRequests * kSlotsPerRequest, kRequests * kCandidates, std::move(policy));
    picks.push_back(DrawPicks(reuse, static_cast<uint32_t>(set + 1)));
  }
  int64_t step = 0;
  for (auto _ : state) {
    for (int32_t set = 0; set < sets; ++set) {
      DeviceSlotCache& cache = caches[static_cast<size_t>(set)];
      const auto& step_picks = picks[static_cast<size_t>(set)][static_cast<size_t>(step % kSteps)];
      for (int32_t request = 0; request < kRequests; ++request) {
        float score = 1.0f;
        for (const int32_t block : step_picks[static_cast<size_t>(request)]) {
          if (!cache.Lookup(block, request).has_value()) {
            benchmark::DoNotOptimize(cache.Acquire(block, request));
          }
          cache.NoteScore(block, score);
          score *= 0.99f;
        }
      }
      cache.EndStep();
    }
    ++step;
  }
  const CacheStats& stats = caches[0].stats();
  state.counters["hit_rate"] = double(stats.hits) / double(stats.hits + stats.misses);
  state.SetLabel(std::string(sets == 1 ? "solohead" : "headwise") + (lru ? " lru" : " score"));
}
BENCHMARK(BM_LayerStep)->ArgsProduct({{1, 8}, {0, 90}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pulse

BENCHMARK_MAIN();
