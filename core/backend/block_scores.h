// How the bounds of several query heads on a candidate KV block (Backend::ScoreBlocks) become one
// score per block for selection, and where in a step's bounds each sparse row's candidates lie
// (Backend::AggregateScores). Plain types shared by the backends and core/kv's BlockSelector.
#pragma once

#include <cstdint>
#include <type_traits>

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
// candidate i of the step) and the score rows they become: the query heads split into
// `num_sets` consecutive groups, each aggregated into `count` scores at
// scores[scores_first + set * count + i]. Copied to the device as bytes.
struct ScoreSegment {
  int32_t first = 0;  // the segment's first candidate (column of the bounds)
  int32_t count = 0;
  int32_t num_sets = 1;
  HeadAggregate aggregate = HeadAggregate::kSoftmaxSum;
  float logit_scale = 1.0f;
  int32_t scores_first = 0;
};
static_assert(std::is_trivially_copyable_v<ScoreSegment> && sizeof(ScoreSegment) == 24);

}  // namespace pulse
