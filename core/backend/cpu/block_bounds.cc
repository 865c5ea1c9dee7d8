// Compiled once a level (kernel_target.h).
#include "core/backend/cpu/block_bounds.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "core/backend/cpu/block_lanes.h"
#include "core/backend/cpu/lanes.h"
#include "core/backend/reference/block_summary.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

PULSE_CPU_KERNELS_BEGIN

// GCC 12 reports the undefined vector that avx512fintrin.h's gather passes to its masked builtin
// as (maybe) uninitialized; no lane of it is read.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

// Query heads scored side by side over one gather of their KV head's rows.
constexpr int kMaxHeads = 4;

// Channels one 4-byte word of a summary row holds.
constexpr int WordChannels(SummaryPrecision precision) {
  switch (precision) {
    case SummaryPrecision::kBf16:
      return 2;
    case SummaryPrecision::kInt8:
      return 4;
    case SummaryPrecision::kInt4:
      return 8;
    case SummaryPrecision::kF32:
      break;
  }
  return 1;
}

// One row a lane: the 4-byte word at byte `at` of lane l's row lies at base + offsets[l] + at.
// (Plain int32s: a std::vector of vector types is not allocated at their alignment.)
struct LaneRows {
  const std::byte* base;
  int32_t offsets[kLanes];

  IntVec Lanes() const {
    IntVec lanes;
    std::memcpy(&lanes, offsets, sizeof(lanes));
    return lanes;
  }
  // The words at `at`, `lanes` being Lanes().
  IntVec Words(size_t at, const IntVec& lanes) const {
    IntVec words;
    const std::byte* from = base + at;
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
    words.part[0] = __builtin_bit_cast(
        IntPart, _mm512_i32gather_epi32(__builtin_bit_cast(__m512i, lanes.part[0]), from, 1));
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
    PULSE_UNROLL_LANES
    for (int p = 0; p < kParts; ++p) {
      words.part[p] = __builtin_bit_cast(
          IntPart, _mm256_i32gather_epi32(reinterpret_cast<const int*>(from),
                                          __builtin_bit_cast(__m256i, lanes.part[p]), 1));
    }
#else
    for (int p = 0; p < kParts; ++p) {
      for (int l = 0; l < kPartLanes; ++l) {
        int32_t word;
        std::memcpy(&word, from + lanes.part[p][l], sizeof(word));
        words.part[p][l] = word;
      }
    }
#endif
    return words;
  }
};

// Channel c of each lane's word in fp32 as the reference reads it: an integer converted, times
// its row's scale.
template <SummaryPrecision kPrecision>
[[gnu::always_inline]] inline Part ChannelOf(IntPart word, int c, Part scale) {
  if constexpr (kPrecision == SummaryPrecision::kF32) {
    return __builtin_bit_cast(Part, word);
  } else if constexpr (kPrecision == SummaryPrecision::kBf16) {
    return __builtin_bit_cast(Part, c == 0 ? word << 16 : word & static_cast<int32_t>(0xFFFF0000u));
  } else {
    constexpr int kBits = kPrecision == SummaryPrecision::kInt8 ? 8 : 4;
    const IntPart value = (word << (32 - kBits * (c + 1))) >> (32 - kBits);  // sign-extended
    return __builtin_convertvector(value, Part) * scale;
  }
}

// Each lane's box sum for kHeads query heads (head h's query at query + h * head_dim) into
// sums[h * sums_stride + lane]: the reference's chain, the sum over d in order of q[d] * row[d]
// (one row a box) or of max(q[d] * lo[d], q[d] * hi[d]) (two, the second row_bytes after the
// first).
template <SummaryPrecision kPrecision, bool kTwoRows, int kHeads>
void LaneSums(const LaneRows& rows, const LaneRows& scales, size_t row_bytes, const float* query,
              int64_t head_dim, float* sums, int64_t sums_stride) {
  constexpr int kChannels = WordChannels(kPrecision);
  Vec lo_scale = {};
  Vec hi_scale = {};
  if constexpr (HasRowScales(kPrecision)) {
    const IntVec lanes = scales.Lanes();
    const IntVec lo_bits = scales.Words(0, lanes);
    const IntVec hi_bits = kTwoRows ? scales.Words(sizeof(float), lanes) : lo_bits;
    for (int p = 0; p < kParts; ++p) {
      lo_scale.part[p] = __builtin_bit_cast(Part, lo_bits.part[p]);
      hi_scale.part[p] = __builtin_bit_cast(Part, hi_bits.part[p]);
    }
  }
  const IntVec lanes = rows.Lanes();
  Vec acc[kHeads] = {};
  for (int64_t word = 0; word < head_dim / kChannels; ++word) {
    const auto at = static_cast<size_t>(word) * sizeof(int32_t);
    const IntVec lo = rows.Words(at, lanes);
    const IntVec hi = kTwoRows ? rows.Words(row_bytes + at, lanes) : lo;
#pragma GCC unroll 8
    for (int c = 0; c < kChannels; ++c) {
      const float* channel = query + word * kChannels + c;
      for (int p = 0; p < kParts; ++p) {
        const Part lo_value = ChannelOf<kPrecision>(lo.part[p], c, lo_scale.part[p]);
        if constexpr (kTwoRows) {
          const Part hi_value = ChannelOf<kPrecision>(hi.part[p], c, hi_scale.part[p]);
          for (int h = 0; h < kHeads; ++h) {
            const float qd = channel[h * head_dim];
            const Part low = qd * lo_value;
            const Part high = qd * hi_value;
            acc[h].part[p] += low < high ? high : low;  // std::max's choice, NaN included
          }
        } else {
          for (int h = 0; h < kHeads; ++h) acc[h].part[p] += channel[h * head_dim] * lo_value;
        }
      }
    }
  }
  for (int h = 0; h < kHeads; ++h) std::memcpy(sums + h * sums_stride, &acc[h], sizeof(Vec));
}

// One ScoreBlocks call's arguments, the estimator resolved for the layout's blocks.
struct Call {
  const float* q;
  int64_t q_stride;
  int32_t group;
  PagedKvLayout layout;
  BlockEstimator estimator;
  SummaryRowLayout rows;
  int32_t box_rows;
  size_t summary_bytes;
  const std::byte* summaries;
  const int32_t* summary_ids;
  const int32_t* query_rows;
  int32_t count;
  float* bounds;

  std::span<const std::byte> summary(int64_t i) const {
    return {summaries + static_cast<size_t>(summary_ids[i]) * summary_bytes, summary_bytes};
  }
  const float* query(int64_t i, int32_t first_head) const {
    return q + query_rows[i] * q_stride + int64_t{first_head} * layout.head_dim;
  }
  float* bound(int32_t head, int64_t i) const { return bounds + int64_t{head} * count + i; }
};

// Candidates [first, first + n)'s bounds over KV head kv_head by the reference itself.
void ReferenceBounds(const Call& call, int64_t first, int64_t n, int32_t kv_head) {
  const int32_t first_head = kv_head * call.group;
  for (int64_t i = first; i < first + n; ++i) {
    reference::GroupBounds(call.layout, call.estimator, call.query(i, first_head), call.group,
                           call.summary(i), kv_head, call.bound(first_head, i), call.count);
  }
}

// Each chunk of kLanes lanes' rows and scales, as offsets from `summaries`.
void ChunkRows(const Call& call, int64_t first, int32_t kv_head, int64_t lanes,
               std::span<LaneRows> rows, std::span<LaneRows> scales) {
  const int32_t boxes = call.estimator.boxes;
  const auto box_rows = static_cast<size_t>(call.box_rows);
  const size_t head_row = static_cast<size_t>(kv_head) * static_cast<size_t>(boxes) * box_rows;
  for (size_t chunk = 0; chunk < rows.size(); ++chunk) {
    int64_t row_at[kLanes];
    int64_t scale_at[kLanes];
    const auto lane0 = static_cast<int64_t>(chunk) * kLanes;
    int64_t k = lane0 / boxes;  // the lane's candidate and box, counted on from lane0
    int64_t box = lane0 % boxes;
    for (int l = 0; l < kLanes; ++l) {
      if (lane0 + l >= lanes) {  // lanes past the end read the chunk's first lane's rows
        row_at[l] = row_at[0];
        scale_at[l] = scale_at[0];
        continue;
      }
      const auto summary_at =
          static_cast<int64_t>(call.summary_ids[first + k] * call.summary_bytes);
      const size_t row = head_row + static_cast<size_t>(box) * box_rows;
      row_at[l] = summary_at + static_cast<int64_t>(call.rows.row_offset(row));
      scale_at[l] = summary_at + static_cast<int64_t>(call.rows.scale_offset(row));
      if (++box == boxes) {
        box = 0;
        ++k;
      }
    }
    for (auto [at, out] : {std::pair{row_at, &rows[chunk]}, std::pair{scale_at, &scales[chunk]}}) {
      out->base = call.summaries;
      for (int l = 0; l < kLanes; ++l) out->offsets[l] = static_cast<int32_t>(at[l]);
    }
  }
}

struct Scratch {
  std::vector<LaneRows> rows;
  std::vector<LaneRows> scales;
  std::vector<float> sums;
};

// The bounds of candidates [first, first + n), which share a query row, their boxes a lane each.
template <SummaryPrecision kPrecision, bool kTwoRows>
void ScoreCandidates(const Call& call, int64_t first, int64_t n, Scratch& scratch) {
  const int32_t boxes = call.estimator.boxes;
  const int64_t lanes = n * boxes;
  const int64_t chunks = (lanes + kLanes - 1) / kLanes;
  const int64_t stride = chunks * kLanes;
  scratch.rows.resize(static_cast<size_t>(chunks));
  scratch.scales.resize(static_cast<size_t>(chunks));
  scratch.sums.resize(static_cast<size_t>(kMaxHeads * stride));
  const float scale = LogSumExpScale(call.layout.head_dim);
  for (int32_t kv_head = 0; kv_head < call.layout.num_kv_heads; ++kv_head) {
    ChunkRows(call, first, kv_head, lanes, scratch.rows, scratch.scales);
    for (int32_t h0 = 0; h0 < call.group; h0 += kMaxHeads) {
      const int32_t heads = std::min(kMaxHeads, call.group - h0);
      const int32_t first_head = kv_head * call.group + h0;
      const float* query = call.query(first, first_head);
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        const LaneRows& rows = scratch.rows[static_cast<size_t>(chunk)];
        const LaneRows& scales = scratch.scales[static_cast<size_t>(chunk)];
        float* sums = scratch.sums.data() + chunk * kLanes;
        WithHeads(heads, [&](auto kHeads) {
          LaneSums<kPrecision, kTwoRows, kHeads>(rows, scales, call.rows.row_bytes, query,
                                                 call.layout.head_dim, sums, stride);
        });
      }
      for (int32_t h = 0; h < heads; ++h) {
        for (int64_t k = 0; k < n; ++k) {
          const std::span<const float> box_sums(scratch.sums.data() + h * stride + k * boxes,
                                                static_cast<size_t>(boxes));
          *call.bound(first_head + h, first + k) =
              reference::CombineBoxBounds(call.estimator.combine, scale, box_sums);
        }
      }
    }
  }
}

template <SummaryPrecision kPrecision, bool kTwoRows>
void ScoreAll(ThreadPool& pool, const Call& call) {
  // As many whole candidates as a chunk of lanes holds (one, spread over chunks, if none fits).
  const int64_t per_chunk = std::max<int64_t>(1, kLanes / call.estimator.boxes);
  pool.ParallelFor(call.count, 16, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t first = begin; first < end;) {
      int64_t n = 1;
      while (n < per_chunk && first + n < end &&
             call.query_rows[first + n] == call.query_rows[first]) {
        ++n;
      }
      // The next candidates' summaries are fetched while these are scored: a long context's
      // summaries come from memory, and a gather waits for every line it touches.
      for (int64_t i = first + n; i < std::min(end, first + 2 * per_chunk); ++i) {
        const std::span<const std::byte> ahead = call.summary(i);
        for (size_t at = 0; at < ahead.size(); at += 64) __builtin_prefetch(ahead.data() + at);
      }
      ScoreCandidates<kPrecision, kTwoRows>(call, first, n, scratch);
      first += n;
    }
  });
}

template <SummaryPrecision kPrecision>
void ScoreAllAt(ThreadPool& pool, const Call& call) {
  if (call.box_rows == 2) {
    ScoreAll<kPrecision, true>(pool, call);
  } else {
    ScoreAll<kPrecision, false>(pool, call);
  }
}

}  // namespace

void ScoreBlocks(ThreadPool& pool, const float* q, int64_t q_stride, int32_t num_heads,
                 const PagedKvLayout& layout, const BlockEstimator& estimator,
                 const std::byte* summaries, const int32_t* summary_ids, const int32_t* query_rows,
                 int32_t count, float* bounds) {
  const BlockEstimator resolved = ForBlocks(estimator, layout.block_tokens);
  const auto summary_bytes = static_cast<size_t>(SummaryBytes(layout, resolved));
  const int32_t last_id = count > 0 ? *std::max_element(summary_ids, summary_ids + count) : 0;
  const bool near = (static_cast<size_t>(last_id) + 1) * summary_bytes <=
                    static_cast<size_t>(std::numeric_limits<int32_t>::max());
  const Call call{.q = q,
                  .q_stride = q_stride,
                  .group = num_heads / layout.num_kv_heads,
                  .layout = layout,
                  .estimator = resolved,
                  .rows = SummaryRows(layout, resolved),
                  .box_rows = SummaryBoxRows(resolved),
                  .summary_bytes = summary_bytes,
                  .summaries = summaries,
                  .summary_ids = summary_ids,
                  .query_rows = query_rows,
                  .count = count,
                  .bounds = bounds};
  // Rows that are not whole words, or summaries past 32-bit offsets of the first (past 2 GiB).
  if (layout.head_dim % WordChannels(resolved.precision) != 0 || !near) {
    pool.ParallelFor(count, 16, [&](int64_t begin, int64_t end) {
      for (int32_t kv_head = 0; kv_head < layout.num_kv_heads; ++kv_head) {
        ReferenceBounds(call, begin, end - begin, kv_head);
      }
    });
    return;
  }
  switch (resolved.precision) {
    case SummaryPrecision::kBf16:
      return ScoreAllAt<SummaryPrecision::kBf16>(pool, call);
    case SummaryPrecision::kInt8:
      return ScoreAllAt<SummaryPrecision::kInt8>(pool, call);
    case SummaryPrecision::kInt4:
      return ScoreAllAt<SummaryPrecision::kInt4>(pool, call);
    case SummaryPrecision::kF32:
      break;
  }
  ScoreAllAt<SummaryPrecision::kF32>(pool, call);
}

#pragma GCC diagnostic pop

PULSE_CPU_KERNELS_END
