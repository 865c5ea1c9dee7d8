#include "core/backend/reference/sample_row.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pulse::reference {
namespace {

using Candidate = SampleScratch::Candidate;

// Below this many candidates the search sorts them instead of cutting further.
constexpr ptrdiff_t kSortedTail = 64;

bool Better(const Candidate& a, const Candidate& b) { return a.key > b.key; }

uint64_t Mass(std::span<const Candidate> candidates) {
  uint64_t mass = 0;
  for (const Candidate& c : candidates) mass += c.weight;
  return mass;
}

// The largest key K with Mass(>= K) >= threshold (1 <= threshold <= Mass(all)). Cuts the
// candidates by rank with nth_element (the first cut just below the best few, where a peaked
// distribution's mass is), so it is linear on average; reorders `candidates`.
uint64_t LargestKeyWithMass(std::span<Candidate> candidates, uint64_t threshold) {
  auto first = candidates.begin();
  auto last = candidates.end();
  uint64_t above = 0;  // the mass of [begin, first), every key of which beats [first, end)
  while (last - first > kSortedTail) {
    const auto middle =
        first == candidates.begin() ? first + kSortedTail : first + (last - first) / 2;
    std::nth_element(first, middle, last, Better);
    const uint64_t mass = Mass(std::span<const Candidate>(first, middle));
    if (above + mass >= threshold) {
      last = middle;
    } else {
      above += mass;
      first = middle;
    }
  }
  std::sort(first, last, Better);
  for (auto it = first; it != last; ++it) {
    above += it->weight;
    if (above >= threshold) return it->key;
  }
  return (last - 1)->key;  // unreachable for a threshold within the mass
}

void KeepKeysAtLeast(std::vector<Candidate>& candidates, uint64_t key) {
  std::erase_if(candidates, [key](const Candidate& c) { return c.key < key; });
}

}  // namespace

int32_t SampleRow(std::span<const float> logits, const TokenSampling& params,
                  std::span<const int32_t> history, SampleScratch& scratch) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  if (params.repetition_penalty != 1.0f && !history.empty()) {
    scratch.penalised.assign(logits.begin(), logits.end());
    for (const int32_t id : history) {
      if (id >= 0 && id < vocab) {
        scratch.penalised[id] = PenalisedLogit(scratch.penalised[id], params.repetition_penalty);
      }
    }
    logits = scratch.penalised;
  }
  int32_t best = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) return -1;
    if (logits[i] != -std::numeric_limits<float>::infinity() &&
        (best < 0 || logits[i] > logits[best])) {
      best = static_cast<int32_t>(i);
    }
  }
  if (best < 0 || params.temperature == 0.0f) return best;

  std::vector<Candidate>& candidates = scratch.candidates;
  candidates.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    candidates[i] = {SampleKey(logits[i], static_cast<int32_t>(i)),
                     SampleWeight(logits[i], logits[best], params.temperature)};
  }
  if (params.top_k > 0 && params.top_k < vocab) {
    std::nth_element(candidates.begin(), candidates.begin() + params.top_k, candidates.end(),
                     Better);
    candidates.resize(static_cast<size_t>(params.top_k));
  }
  if (params.top_p < 1.0f) {
    const auto target =
        static_cast<uint64_t>(std::ceil(static_cast<double>(params.top_p) * Mass(candidates)));
    KeepKeysAtLeast(candidates, LargestKeyWithMass(candidates, std::max<uint64_t>(target, 1)));
  }
  if (params.min_p > 0.0f) {
    const uint64_t least = std::min<uint64_t>(
        static_cast<uint64_t>(std::ceil(static_cast<double>(params.min_p) *
                                        static_cast<double>(uint64_t{1} << kSampleWeightBits))),
        kSampleWeightMax);
    std::erase_if(candidates, [least](const Candidate& c) { return c.weight < least; });
  }
  const uint64_t mass = Mass(candidates);
  // uniform < 1, but uniform * mass can round up to mass.
  const uint64_t target =
      std::min(static_cast<uint64_t>(params.uniform * static_cast<double>(mass)), mass - 1);
  return SampleKeyId(LargestKeyWithMass(candidates, target + 1));
}

}  // namespace pulse::reference
