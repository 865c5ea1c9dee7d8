#include "tests/tools/pick_crosscheck.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/base/status.h"

namespace pulse {
namespace {

// How far a step's segments reach into the scores and the picks.
struct SegmentsReach {
  int64_t scores = 0;
  int64_t picks = 0;
};
SegmentsReach ReachOf(std::span<const ScoreSegment> segments) {
  SegmentsReach reach;
  for (const ScoreSegment& segment : segments) {
    reach.scores =
        std::max(reach.scores, segment.scores_first + int64_t{segment.num_sets} * segment.count);
    reach.picks =
        std::max(reach.picks, segment.picks_first + int64_t{segment.num_sets} * segment.picks);
  }
  return reach;
}

size_t GapBucket(float score, float threshold) {
  const double a = score;
  const double b = threshold;
  const double gap = a == b ? 0.0 : std::abs(a - b) / std::max(std::abs(a), std::abs(b));
  for (size_t bucket = 0; bucket < kPickGapBounds.size(); ++bucket) {
    if (gap < kPickGapBounds[bucket]) return bucket;
  }
  return kPickGapBounds.size();
}

// Counts one set's picks `got` against the reference's `want` (both increasing candidate indices),
// with the reference's `scores` of the set's candidates.
void CountPicks(std::span<const int32_t> want, std::span<const int32_t> got,
                std::span<const float> scores, PickCrossCheckStats& stats) {
  float threshold = std::numeric_limits<float>::quiet_NaN();
  if (!want.empty()) {
    threshold = scores[static_cast<size_t>(
        *std::max_element(want.begin(), want.end(), [&](int32_t a, int32_t b) {
          return SelectionKey(scores[static_cast<size_t>(a)]) <
                 SelectionKey(scores[static_cast<size_t>(b)]);
        }))];
  }
  ++stats.selections;
  for (const int32_t pick : got) {
    ++stats.picks;
    if (std::binary_search(want.begin(), want.end(), pick)) {
      ++stats.same;
      continue;
    }
    const bool candidate = pick >= 0 && static_cast<size_t>(pick) < scores.size();
    ++stats.differing[candidate ? GapBucket(scores[static_cast<size_t>(pick)], threshold)
                                : kPickGapBounds.size()];
  }
}

}  // namespace

void PickCrossCheckStats::Add(const PickCrossCheckStats& other) {
  selections += other.selections;
  picks += other.picks;
  same += other.same;
  for (size_t bucket = 0; bucket < differing.size(); ++bucket) {
    differing[bucket] += other.differing[bucket];
  }
  if (error.ok()) error = other.error;
}

PickCrossCheckBackend::PickCrossCheckBackend(std::shared_ptr<Backend> primary,
                                             std::shared_ptr<Backend> reference)
    : primary_(std::move(primary)), reference_(std::move(reference)) {}

PickCrossCheckStats PickCrossCheckBackend::TakeStats() { return std::exchange(stats_, {}); }

absl::Status PickCrossCheckBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  absl::Status status = primary_->CopyToHost(dst, src, bytes);
  if (!pending_.ok()) return std::exchange(pending_, absl::OkStatus());
  return status;
}

absl::Status PickCrossCheckBackend::Synchronize() {
  absl::Status status = primary_->Synchronize();
  if (!pending_.ok()) return std::exchange(pending_, absl::OkStatus());
  return status;
}

void PickCrossCheckBackend::ScoreBlocks(const float* q, int64_t q_stride, int32_t num_heads,
                                        const PagedKvLayout& layout,
                                        const BlockEstimator& estimator, const void* summaries,
                                        const int32_t* summary_ids, const int32_t* query_rows,
                                        int32_t count, float* bounds) {
  primary_->ScoreBlocks(q, q_stride, num_heads, layout, estimator, summaries, summary_ids,
                        query_rows, count, bounds);
  bounds_.erase(bounds);
  absl::StatusOr<std::vector<float>> reference = ReferenceBounds(
      q, q_stride, num_heads, layout, estimator, summaries, summary_ids, query_rows, count);
  if (!reference.ok()) {
    Fail(reference.status());
    return;
  }
  bounds_[bounds] = *std::move(reference);
}

void PickCrossCheckBackend::AggregateScores(const float* bounds, int32_t num_heads,
                                            int64_t bound_stride, const ScoreSegment* segments,
                                            int32_t num_segments, int32_t max_sets, float* scores) {
  primary_->AggregateScores(bounds, num_heads, bound_stride, segments, num_segments, max_sets,
                            scores);
  scores_.erase(scores);
  const auto shadow = bounds_.find(bounds);
  if (shadow == bounds_.end()) return;
  absl::StatusOr<std::vector<float>> reference =
      ReferenceScores(shadow->second, num_heads, bound_stride, segments, num_segments, max_sets);
  if (!reference.ok()) {
    Fail(reference.status());
    return;
  }
  scores_[scores] = *std::move(reference);
}

void PickCrossCheckBackend::DrawSyntheticScores(const int32_t* summary_ids,
                                                const ScoreSegment* segments, int32_t num_segments,
                                                int32_t max_sets, const int32_t* step,
                                                const SyntheticPicks& picks, int32_t layer,
                                                float* scores) {
  primary_->DrawSyntheticScores(summary_ids, segments, num_segments, max_sets, step, picks, layer,
                                scores);
  // The draws replace the aggregated scores, and draws are integer math: nothing to compare.
  scores_.erase(scores);
}

void PickCrossCheckBackend::SelectTopBlocks(const float* scores, const ScoreSegment* segments,
                                            int32_t num_segments, int32_t max_sets,
                                            int32_t* picked) {
  primary_->SelectTopBlocks(scores, segments, num_segments, max_sets, picked);
  const auto shadow = scores_.find(scores);
  if (shadow != scores_.end()) {
    const absl::Status compared =
        ComparePicks(shadow->second, segments, num_segments, max_sets, picked);
    if (!compared.ok()) Fail(compared);
  }
  bounds_.clear();
  scores_.clear();
}

absl::Status PickCrossCheckBackend::Fetch(void* dst, const void* src, size_t bytes) {
  absl::Status status = primary_->CopyToHost(dst, src, bytes);
  if (!status.ok() && pending_.ok()) pending_ = status;
  return status;
}

template <typename T>
absl::StatusOr<std::vector<T>> PickCrossCheckBackend::FetchArray(const T* src, int64_t count) {
  std::vector<T> values(static_cast<size_t>(count));
  PULSE_RETURN_IF_ERROR(Fetch(values.data(), src, values.size() * sizeof(T)));
  return values;
}

absl::StatusOr<std::vector<float>> PickCrossCheckBackend::ReferenceBounds(
    const float* q, int64_t q_stride, int32_t num_heads, const PagedKvLayout& layout,
    const BlockEstimator& estimator, const void* summaries, const int32_t* summary_ids,
    const int32_t* query_rows, int32_t count) {
  if (count <= 0) return std::vector<float>();
  PULSE_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, FetchArray(summary_ids, count));
  PULSE_ASSIGN_OR_RETURN(const std::vector<int32_t> rows, FetchArray(query_rows, count));
  const auto [min_id, max_id] = std::minmax_element(ids.begin(), ids.end());
  const auto [min_row, max_row] = std::minmax_element(rows.begin(), rows.end());
  if (*min_id < 0 || *min_row < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ScoreBlocks: summary id %d, query row %d: negative", *min_id, *min_row));
  }
  PULSE_ASSIGN_OR_RETURN(const std::vector<std::byte> host_summaries,
                         FetchArray(static_cast<const std::byte*>(summaries),
                                    (int64_t{*max_id} + 1) * SummaryBytes(layout, estimator)));
  PULSE_ASSIGN_OR_RETURN(const std::vector<float> host_q,
                         FetchArray(q, *max_row * q_stride + int64_t{num_heads} * layout.head_dim));
  std::vector<float> bounds(static_cast<size_t>(int64_t{num_heads} * count));
  reference_->ScoreBlocks(host_q.data(), q_stride, num_heads, layout, estimator,
                          host_summaries.data(), ids.data(), rows.data(), count, bounds.data());
  PULSE_RETURN_IF_ERROR(reference_->Synchronize());
  return bounds;
}

absl::StatusOr<std::vector<float>> PickCrossCheckBackend::ReferenceScores(
    const std::vector<float>& bounds, int32_t num_heads, int64_t bound_stride,
    const ScoreSegment* segments, int32_t num_segments, int32_t max_sets) {
  if (bound_stride < 0 || static_cast<int64_t>(bounds.size()) < num_heads * bound_stride) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AggregateScores: bounds of %d heads by %d candidates, ScoreBlocks wrote %d", num_heads,
        bound_stride, bounds.size()));
  }
  PULSE_ASSIGN_OR_RETURN(const std::vector<ScoreSegment> host_segments,
                         FetchArray(segments, num_segments));
  std::vector<float> scores(static_cast<size_t>(ReachOf(host_segments).scores));
  reference_->AggregateScores(bounds.data(), num_heads, bound_stride, host_segments.data(),
                              num_segments, max_sets, scores.data());
  PULSE_RETURN_IF_ERROR(reference_->Synchronize());
  return scores;
}

absl::Status PickCrossCheckBackend::ComparePicks(const std::vector<float>& scores,
                                                 const ScoreSegment* segments, int32_t num_segments,
                                                 int32_t max_sets, const int32_t* picked) {
  PULSE_ASSIGN_OR_RETURN(const std::vector<ScoreSegment> host_segments,
                         FetchArray(segments, num_segments));
  const SegmentsReach reach = ReachOf(host_segments);
  if (static_cast<int64_t>(scores.size()) < reach.scores) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SelectTopBlocks: segments reach %d scores, AggregateScores wrote %d with other segments",
        reach.scores, scores.size()));
  }
  std::vector<int32_t> expected(static_cast<size_t>(reach.picks));
  reference_->SelectTopBlocks(scores.data(), host_segments.data(), num_segments, max_sets,
                              expected.data());
  PULSE_RETURN_IF_ERROR(reference_->Synchronize());
  PULSE_ASSIGN_OR_RETURN(const std::vector<int32_t> actual, FetchArray(picked, reach.picks));
  for (const ScoreSegment& segment : host_segments) {
    for (int32_t set = 0; set < segment.num_sets; ++set) {
      const auto picks_at = static_cast<size_t>(segment.picks_first + int64_t{set} * segment.picks);
      const auto scores_at =
          static_cast<size_t>(segment.scores_first + int64_t{set} * segment.count);
      const auto picks = static_cast<size_t>(segment.picks);
      CountPicks(std::span(expected).subspan(picks_at, picks),
                 std::span(actual).subspan(picks_at, picks),
                 std::span(scores).subspan(scores_at, static_cast<size_t>(segment.count)), stats_);
    }
  }
  return absl::OkStatus();
}

void PickCrossCheckBackend::Fail(absl::Status status) {
  if (stats_.error.ok()) stats_.error = std::move(status);
}

}  // namespace pulse
