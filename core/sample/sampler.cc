#include "core/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace pulse {
namespace {

constexpr float kInfinity = std::numeric_limits<float>::infinity();
// Top-p cuts the candidates by rank (the best this many first, then halves) down to a range this
// short, then sorts it.
constexpr ptrdiff_t kTopPSortedTail = 64;

absl::Status CheckLogits(std::span<const float> logits) {
  bool any_finite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i]) || logits[i] == kInfinity) {
      return absl::InvalidArgumentError(
          absl::StrFormat("logit %d is %g: cannot sample", i, logits[i]));
    }
    any_finite |= logits[i] != -kInfinity;
  }
  if (!any_finite) {
    return absl::InvalidArgumentError("every logit is -inf: cannot sample");
  }
  return absl::OkStatus();
}

int32_t Argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace

Sampler::Sampler(const SamplingParams& params) : params_(params), generator_(params.seed) {}

absl::StatusOr<int32_t> Sampler::Sample(std::span<const float> logits,
                                        std::span<const int32_t> history) {
  PULSE_RETURN_IF_ERROR(CheckLogits(logits));
  const std::span<const float> scores = Penalise(logits, history);
  if (params_.temperature == 0.0f) return Argmax(scores);

  Filter(scores);
  double total = 0.0;
  for (const double weight : weights_) total += weight;
  const double target = Uniform() * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += weights_[i];
    if (target < cumulative) return candidates_[i].id;
  }
  // Only when target rounded up to total: the last candidate with any mass.
  for (size_t i = candidates_.size(); i-- > 0;) {
    if (weights_[i] > 0.0) return candidates_[i].id;
  }
  return candidates_.front().id;
}

std::span<const float> Sampler::Penalise(std::span<const float> logits,
                                         std::span<const int32_t> history) {
  const float penalty = params_.repetition_penalty;
  if (penalty == 1.0f || history.empty()) return logits;
  penalised_.assign(logits.begin(), logits.end());
  // Each distinct id is penalised once, however often it occurs.
  penalised_ids_.assign(history.begin(), history.end());
  std::sort(penalised_ids_.begin(), penalised_ids_.end());
  penalised_ids_.erase(std::unique(penalised_ids_.begin(), penalised_ids_.end()),
                       penalised_ids_.end());
  for (const int32_t id : penalised_ids_) {
    if (id < 0 || static_cast<size_t>(id) >= penalised_.size()) continue;
    float& logit = penalised_[static_cast<size_t>(id)];
    logit = logit > 0.0f ? logit / penalty : logit * penalty;
  }
  return penalised_;
}

void Sampler::Filter(std::span<const float> logits) {
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  }
  const size_t top_k = static_cast<size_t>(params_.top_k);
  if (top_k > 0 && top_k < candidates_.size()) {
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(top_k),
                     candidates_.end(), Better);
    candidates_.resize(top_k);
  }

  max_logit_ = -kInfinity;
  for (const Candidate& c : candidates_) max_logit_ = std::max(max_logit_, c.logit);
  if (params_.top_p < 1.0f) KeepTopP();
  weights_.resize(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) weights_[i] = Weight(candidates_[i]);

  if (params_.min_p > 0.0f) {
    size_t kept = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (weights_[i] >= params_.min_p) {
        candidates_[kept] = candidates_[i];
        weights_[kept] = weights_[i];
        ++kept;
      }
    }
    candidates_.resize(kept);
    weights_.resize(kept);
  }
}

void Sampler::KeepTopP() {
  double total = 0.0;
  for (const Candidate& c : candidates_) total += Weight(c);
  const double target = static_cast<double>(params_.top_p) * total;
  // Cut by rank: [begin, first) ranks above [first, last), which ranks above [last, end);
  // [begin, first) holds less than the target mass and [begin, last) at least as much (or last
  // is the end), so the nucleus ends inside [first, last). Linear on average, with no full sort.
  auto first = candidates_.begin();
  auto last = candidates_.end();
  double kept_mass = 0.0;  // of [begin, first)
  while (last - first > kTopPSortedTail) {
    // The first cut is just below the best few, where a peaked distribution's nucleus ends.
    const auto middle =
        first == candidates_.begin() ? first + kTopPSortedTail : first + (last - first) / 2;
    std::nth_element(first, middle, last, Better);
    double mass = 0.0;
    for (auto it = first; it != middle; ++it) mass += Weight(*it);
    if (kept_mass + mass >= target) {
      last = middle;
    } else {
      kept_mass += mass;
      first = middle;
    }
  }
  std::sort(first, last, Better);
  for (; first != last && kept_mass < target; ++first) kept_mass += Weight(*first);
  candidates_.erase(first, candidates_.end());
}

bool Sampler::Better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

double Sampler::Weight(const Candidate& c) const {
  // c.logit - max_logit_ <= 0, so neither a tiny temperature nor a wide logit range overflows.
  return std::exp((c.logit - max_logit_) / params_.temperature);
}

double Sampler::Uniform() { return static_cast<double>(generator_() >> 11) * 0x1.0p-53; }

}  // namespace pulse
