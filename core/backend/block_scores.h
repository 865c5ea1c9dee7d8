// How the bounds of several query heads on a candidate KV block (Backend::ScoreBlocks) become one
// score per block for selection, and where in a step's bounds each sparse row's candidates lie
// (Backend::AggregateScores). Plain types shared by the backends and core/kv's BlockSelector.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/backend/host_device.h"

namespace pulse {

// How the bounds of several query heads become one score per candidate block: over the query
// heads of a KV head's group (headwise), or over every query head of the layer (solohead).
enum class HeadAggregate : int32_t {
  // Sum over heads of each head's softmax, over the candidates, of logit_scale * bound. The bound
  // estimates a block's largest attention logit, so a head's softmax estimates the share of its
  // attention each block would take, and the sum ranks blocks by the attention they give back
  // across heads. Softmax, like attention, ignores a head's logit offset; dividing by a head's
  // max |bound| instead would not (a head whose bounds sit near 100 would come out nearly flat,
  // one whose bounds straddle 0 steep), and would ignore the temperature that makes one head's
  // preference sharper than another's.
  kSoftmaxSum,
  // Max over heads of the raw bound: a block that any one head may attend strongly to is kept;
  // heads whose logits run larger dominate.
  kMax,
};

// One sparse row's candidates in a step's bounds ([num_heads][bound_stride]: column i is
// candidate i of the step), the score rows they become, and the picks selection makes of them:
// the query heads split into `num_sets` consecutive groups, each aggregated into `count` scores
// at scores[scores_first + set * count + i], of which each set picks `picks` candidates, written
// at picked[picks_first + set * picks + j] (Backend::SelectTopBlocks). Copied to the device as
// bytes.
struct ScoreSegment {
  int32_t first = 0;  // the segment's first candidate (column of the bounds)
  int32_t count = 0;
  int32_t num_sets = 1;
  HeadAggregate aggregate = HeadAggregate::kSoftmaxSum;
  float logit_scale = 1.0f;
  int32_t scores_first = 0;
  int32_t picks = 0;  // at most count
  int32_t picks_first = 0;
};
static_assert(std::is_trivially_copyable_v<ScoreSegment> && sizeof(ScoreSegment) == 32);

// A key that orders a candidate as selection ranks it, the smallest first: the higher score
// first, NaN after every number, -0 equal to +0. Candidates with equal keys rank by index, the
// lower first. The score's bits made to order as unsigned integers, then inverted.
PULSE_HOST_DEVICE inline uint32_t SelectionKey(float score) {
  if (score != score) return 0xffffffffu;  // NaN
  const float normalized = score + 0.0f;   // -0 becomes +0
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(normalized);
#else
  uint32_t bits;
  std::memcpy(&bits, &normalized, sizeof(bits));
#endif
  const uint32_t ordered = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  return ~ordered;
}

// Picks drawn instead of scored, to measure what recall costs at a given step-to-step reuse of
// the picks (a trained model keeps most of its picks from one step to the next, random weights
// few): each candidate's score is a seeded uniform draw in [0, 1) that is drawn again every
// period_q / 1024 steps, at a phase of its own, so that about 1024 / period_q of the candidates
// are drawn again each step. A candidate is its block's summary, a layer's and a set's draws are
// their own. Picks still go through selection, tables and recall as scored picks do.
struct SyntheticPicks {
  int32_t period_q = 0;  // 1024 / (1 - reuse): 1024 (every step) upwards
  uint32_t seed = 0;
};
static_assert(std::is_trivially_copyable_v<SyntheticPicks>);

// The draws of a reuse in [0, 1): period 1024 / (1 - reuse), rounded.
inline SyntheticPicks SyntheticPicksAt(double reuse, uint32_t seed) {
  return {.period_q = static_cast<int32_t>(1024.0 / (1.0 - reuse) + 0.5), .seed = seed};
}

// splitmix64's finalizer: every bit of `x` moves every bit of the result.
PULSE_HOST_DEVICE inline uint64_t MixBits(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The score of the candidate whose summary is `summary_id`, in `layer` and `set`, at `step`:
// integers only, so every backend draws the same bits.
PULSE_HOST_DEVICE inline float SyntheticScore(const SyntheticPicks& picks, int32_t summary_id,
                                              int32_t layer, int32_t set, int32_t step) {
  const uint64_t candidate = MixBits(
      MixBits((uint64_t{picks.seed} << 32) | static_cast<uint32_t>(summary_id)) ^
      ((static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(set)));
  const auto period = static_cast<uint64_t>(picks.period_q);
  const uint64_t epoch =
      (static_cast<uint64_t>(static_cast<uint32_t>(step)) * 1024 + candidate % period) / period;
  const uint64_t draw = MixBits(candidate ^ MixBits(epoch + 1));
  return static_cast<float>(draw >> 40) * (1.0f / 16777216.0f);
}

}  // namespace pulse
