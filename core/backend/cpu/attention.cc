#include "core/backend/cpu/attention.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/backend/cpu/exp.h"
#include "core/backend/cpu/lanes.h"

PULSE_CPU_KERNELS_BEGIN
namespace {

// Start of kv head `kv_head`'s keys in logical block `logical_block` of sequence `seq`; the
// block's values of that head are ValueOffset() further.
float* HeadKeys(const PagedKvBatch& kv, int32_t seq, int64_t logical_block, int32_t kv_head) {
  const int32_t block =
      kv.block_tables[kv.TableRow(seq, kv_head) * kv.max_blocks_per_seq + logical_block];
  assert(block >= 0);
  return static_cast<float*>(kv.blocks) + block * kv.layout.block_elems() +
         kv_head * kv.layout.head_elems();
}

// Keys one work item attends to at most: a row's keys 0..position are cut into ranges of this
// many from key 0, each scored and summed on its own and then merged (MergeSplits), so that a
// single decode row spreads over the threads and a range's keys and values stay in the core's
// cache while every query head of the group reads them. The ranges depend on the position only.
constexpr int64_t kSplitKeys = 512;
// Keys scored at once for up to kScoreHeads heads: their dot products are independent chains.
constexpr int kKeyTile = 4;
constexpr int32_t kScoreHeads = 4;
static_assert(kKeyTile * kScoreHeads <= 16, "a tile's sums reduce as one set of sixteen");
// Dimensions of the value sums kept in registers at once, and how many heads of a group share
// each load of a value: four parts a head, at most 16 registers of accumulators.
constexpr int32_t kValueDims = 4 * kPartLanes;
constexpr int32_t kValueHeads = kParts == 1 ? 4 : (kParts == 2 ? 2 : 1);

// How far ahead of its use a key or value is fetched: the keys of a range lie in pieces of a
// block's length, too short for the hardware's prefetcher to run ahead.
constexpr int64_t kPrefetchKeys = 16;

void PrefetchRow(const float* row, int32_t dims) {
  for (int32_t d = 0; d < dims; d += 64 / sizeof(float)) __builtin_prefetch(row + d);
}

// keys[i] = the key of token first + i of one sequence's KV head, for tokens first..last; its
// value is value_offset() further.
void KeyPointers(const PagedKvBatch& kv, int32_t seq, int32_t kv_head, int64_t first, int64_t last,
                 const float** keys) {
  const int32_t block_tokens = kv.layout.block_tokens;
  const int32_t head_dim = kv.layout.head_dim;
  for (int64_t t = first; t <= last;) {
    const float* key = HeadKeys(kv, seq, t / block_tokens, kv_head) + (t % block_tokens) * head_dim;
    const int64_t end = std::min<int64_t>(t - t % block_tokens + block_tokens, last + 1);
    for (; t < end; ++t, key += head_dim) *keys++ = key;
  }
}

// For the kHeads heads h (queries head_dim apart): p[h][i] = Dot(query_h, keys[i], head_dim) *
// scale for i < count, and max[h] their maximum in key order. Each key is loaded once for every
// head, and the values of the keys ahead are fetched for the weighted sum that follows.
template <int kHeads>
void ScoreKeys(const float* queries, const float* const* keys, int64_t count, int32_t head_dim,
               int64_t value_offset, float scale, float* p, int64_t p_stride, float* max) {
  float top[kHeads];  // the maxima, in registers (max may alias p)
  for (int h = 0; h < kHeads; ++h) top[h] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kKeyTile <= count; i += kKeyTile) {
    if (i + kPrefetchKeys + kKeyTile <= count) {
      for (int k = 0; k < kKeyTile; ++k) {
        PrefetchRow(keys[i + kPrefetchKeys + k], head_dim);
        PrefetchRow(keys[i + kPrefetchKeys + k] + value_offset, head_dim);
      }
    }
    Vec acc[kHeads][kKeyTile];
    for (int h = 0; h < kHeads; ++h) {
      for (int k = 0; k < kKeyTile; ++k) acc[h][k] = Vec{};
    }
    int32_t d = 0;
    for (; d + kLanes <= head_dim; d += kLanes) {
      Vec key[kKeyTile];
      for (int k = 0; k < kKeyTile; ++k) key[k] = LoadVec(keys[i + k] + d);
      for (int h = 0; h < kHeads; ++h) {
        const Vec q = LoadVec(queries + int64_t{h} * head_dim + d);
        for (int k = 0; k < kKeyTile; ++k) acc[h][k] = MulAdd(q, key[k], acc[h][k]);
      }
    }
    if (d < head_dim) {
      for (int h = 0; h < kHeads; ++h) {
        const Vec q = LoadPartialVec(queries + int64_t{h} * head_dim + d, head_dim - d);
        for (int k = 0; k < kKeyTile; ++k) {
          acc[h][k] = MulAdd(q, LoadPartialVec(keys[i + k] + d, head_dim - d), acc[h][k]);
        }
      }
    }
    float score[kHeads][kKeyTile];
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
    if constexpr (kHeads > 1) {
      Part sums[16] = {};
      for (int h = 0; h < kHeads; ++h) {
        for (int k = 0; k < kKeyTile; ++k) sums[h * kKeyTile + k] = acc[h][k].part[0];
      }
      const Part reduced = ReduceLanes16(sums);
      for (int h = 0; h < kHeads; ++h) {
        for (int k = 0; k < kKeyTile; ++k) score[h][k] = reduced[h * kKeyTile + k];
      }
    } else
#endif
    {
      for (int h = 0; h < kHeads; ++h) {
        for (int k = 0; k < kKeyTile; ++k) score[h][k] = ReduceLanes(acc[h][k]);
      }
    }
    for (int h = 0; h < kHeads; ++h) {
      for (int k = 0; k < kKeyTile; ++k) {
        const float value = score[h][k] * scale;
        p[h * p_stride + i + k] = value;
        top[h] = std::max(top[h], value);
      }
    }
  }
  for (; i < count; ++i) {
    for (int h = 0; h < kHeads; ++h) {
      const float value = Dot(queries + int64_t{h} * head_dim, keys[i], head_dim) * scale;
      p[h * p_stride + i] = value;
      top[h] = std::max(top[h], value);
    }
  }
  for (int h = 0; h < kHeads; ++h) max[h] = top[h];
}

// For the kHeads heads h: out[h][d] = sum_i p[h][i] * value_i[d] over d in [d0, d0 +
// kValueDims), each a chain of fused multiply-adds in key order from 0.
template <int kHeads>
void WeightedValueChunk(const float* const* keys, int64_t count, int64_t value_offset,
                        const float* p, int64_t p_stride, int32_t d0, float* out,
                        int64_t out_stride) {
  Part acc[kHeads][4];
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[h][c] = Part{};
  }
  for (int64_t i = 0; i < count; ++i) {
    const float* value = keys[i] + value_offset + d0;
    Part v[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) std::memcpy(&v[c], value + c * kPartLanes, sizeof(Part));
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
      const Part weight = Broadcast(p[h * p_stride + i]);  // exp(): never -0
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[h][c] = MulAdd(weight, v[c], acc[h][c]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      std::memcpy(out + h * out_stride + d0 + c * kPartLanes, &acc[h][c], sizeof(Part));
    }
  }
}

// out[h][d] = sum_i p[h][i] * value_i[d] for heads h < heads and every d < head_dim, each a chain
// of fused multiply-adds in key order from 0 (so the chunking changes no value).
void WeightedValues(const float* const* keys, int64_t count, int64_t value_offset, int32_t head_dim,
                    const float* p, int64_t p_stride, int32_t heads, float* out) {
  int32_t d0 = 0;
  for (; d0 + kValueDims <= head_dim; d0 += kValueDims) {
    for (int32_t h = 0; h < heads; h += kValueHeads) {
      WithHeads(std::min(heads - h, kValueHeads), [&](auto n) {
        WeightedValueChunk<n>(keys, count, value_offset, p + h * p_stride, p_stride, d0,
                              out + int64_t{h} * head_dim, head_dim);
      });
    }
  }
  for (int32_t h = 0; h < heads; ++h) {
    for (int32_t d = d0; d < head_dim; ++d) {
      float acc = 0.0f;
      for (int64_t i = 0; i < count; ++i) {
        acc = MulAdd(p[h * p_stride + i], keys[i][value_offset + d], acc);
      }
      out[int64_t{h} * head_dim + d] = acc;
    }
  }
}

// One work item: the query heads of KV head `kv_head` in query row `row` (all of the group, or
// one each when items are few), over keys first..last of the row's keys.
struct SplitItem {
  int32_t row;
  int32_t seq;
  int32_t kv_head;
  int64_t first;
  int64_t last;
  int64_t partial;  // its first slot among the partial results, or -1 for a row of one range
};

// A thread's buffers, kept from call to call (a decode step makes a call a layer).
struct SplitScratch {
  void Reserve(int32_t group, int32_t head_dim, int64_t splits) {
    keys.resize(kSplitKeys);
    p.resize(static_cast<size_t>(group) * kSplitKeys);
    max.resize(group);
    sum.resize(group);
    values.resize(static_cast<size_t>(group) * head_dim);
    weights.resize(splits);
  }
  std::vector<const float*> keys;
  std::vector<float> p;                 // [group][kSplitKeys]: scores, then their exponentials
  std::vector<float> max, sum, values;  // a row of one range's results before normalizing
  std::vector<float> weights;           // MergeSplits' weight of each range
};

SplitScratch& ThreadScratch() {
  thread_local SplitScratch scratch;
  return scratch;
}

// The unnormalized softmax of `group` query heads (q, head_dim apart) of one item over its keys:
// max[h], sum[h] of exp(score - max) and values[h][d] = sum_i exp(score_i - max) * value_i[d].
void AttendSplit(const float* q, int32_t group, const PagedKvBatch& kv, const SplitItem& item,
                 float scale, SplitScratch& scratch, float* max, float* sum, float* values) {
  const int32_t head_dim = kv.layout.head_dim;
  const int64_t count = item.last - item.first + 1;
  KeyPointers(kv, item.seq, item.kv_head, item.first, item.last, scratch.keys.data());
  const int64_t value_offset = kv.layout.value_offset();
  for (int32_t h = 0; h < group; h += kScoreHeads) {
    WithHeads(std::min(group - h, kScoreHeads), [&](auto n) {
      ScoreKeys<n>(q + int64_t{h} * head_dim, scratch.keys.data(), count, head_dim, value_offset,
                   scale, scratch.p.data() + int64_t{h} * kSplitKeys, kSplitKeys, max + h);
    });
  }
  for (int32_t h = 0; h < group; ++h) {
    float* p = scratch.p.data() + int64_t{h} * kSplitKeys;
    for (int64_t i = 0; i < count; ++i) p[i] = Exp(p[i] - max[h]);
    sum[h] = Sum(p, count);
  }
  WeightedValues(scratch.keys.data(), count, value_offset, head_dim, scratch.p.data(), kSplitKeys,
                 group, values);
}

// out[d] = (sum_s w_s * values_s[d]) / (sum_s w_s * sum_s), w_s = exp(max_s - the largest max),
// over `splits` partial results in key order (`stride` apart): the softmax over all the keys. One
// range is its own normalization (w = 1). `weights` holds `splits` floats.
void MergeSplits(const float* max, const float* sum, const float* values, int64_t splits,
                 int64_t stride, int32_t head_dim, float* weights, float* out) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < splits; ++s) top = std::max(top, max[s * stride]);
  float total = 0.0f;
  for (int64_t s = 0; s < splits; ++s) {
    weights[s] = Exp(max[s * stride] - top);
    total = MulAdd(sum[s * stride], weights[s], total);
  }
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t s = 0; s < splits; ++s) {
    const float* range = values + s * stride * head_dim;
    for (int32_t d = 0; d < head_dim; ++d) out[d] = MulAdd(range[d], weights[s], out[d]);
  }
  const float inv_total = 1.0f / total;
  for (int32_t d = 0; d < head_dim; ++d) out[d] *= inv_total;
}

}  // namespace

void AppendKv(const float* k, const float* v, int64_t row_stride, const PagedKvBatch& kv) {
  assert(kv.table_heads == 1);
  const PagedKvLayout& layout = kv.layout;
  const size_t head_bytes = static_cast<size_t>(layout.head_dim) * sizeof(float);
  const int64_t value_offset = layout.value_offset();
  for (int32_t s = 0; s < kv.num_seqs; ++s) {
    const int32_t q_begin = kv.q_offsets[s];
    const int32_t q_len = kv.q_offsets[s + 1] - q_begin;
    assert(q_len >= 0 && q_len <= kv.kv_lens[s]);
    for (int32_t i = 0; i < q_len; ++i) {
      const int64_t row = q_begin + i;
      const int64_t position = kv.kv_lens[s] - q_len + i;
      for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
        float* key = HeadKeys(kv, s, position / layout.block_tokens, h) +
                     (position % layout.block_tokens) * layout.head_dim;
        std::memcpy(key, k + row * row_stride + int64_t{h} * layout.head_dim, head_bytes);
        std::memcpy(key + value_offset, v + row * row_stride + int64_t{h} * layout.head_dim,
                    head_bytes);
      }
    }
  }
}

void Attention(ThreadPool& pool, const float* q, int64_t q_stride, int32_t num_heads,
               const PagedKvBatch& kv, float scale, float* out) {
  const PagedKvLayout& layout = kv.layout;
  const int32_t head_dim = layout.head_dim;
  const int32_t kv_heads = layout.num_kv_heads;
  assert(kv_heads > 0 && num_heads % kv_heads == 0);
  assert(kv.table_heads == 1 || kv.max_q_len <= 1);
  const int32_t group = num_heads / kv_heads;

  // The items of every (row, KV head); a row of several ranges keeps their partial results in
  // range order for MergeSplits.
  struct Merge {
    int64_t first_item;
    int64_t splits;
  };
  std::vector<SplitItem> items;
  std::vector<Merge> merges;
  int64_t partials = 0;
  int64_t max_splits = 1;
  for (int32_t seq = 0; seq < kv.num_seqs; ++seq) {
    const int32_t q_len = kv.q_offsets[seq + 1] - kv.q_offsets[seq];
    for (int32_t row = kv.q_offsets[seq]; row < kv.q_offsets[seq + 1]; ++row) {
      for (int32_t kv_head = 0; kv_head < kv_heads; ++kv_head) {
        const int64_t position =
            kv.kv_lens[kv.TableRow(seq, kv_head)] - q_len + (row - kv.q_offsets[seq]);
        const int64_t splits = position / kSplitKeys + 1;
        if (splits > 1) merges.push_back({static_cast<int64_t>(items.size()), splits});
        max_splits = std::max(max_splits, splits);
        for (int64_t s = 0; s < splits; ++s) {
          items.push_back({row, seq, kv_head, s * kSplitKeys,
                           std::min(position, (s + 1) * kSplitKeys - 1),
                           splits > 1 ? partials++ * group : -1});
        }
      }
    }
  }
  // [partial][group] maxima and sums, [partial][group][head_dim] values.
  std::vector<float> partial_max(partials * group);
  std::vector<float> partial_sum(partials * group);
  std::vector<float> partial_values(partials * group * head_dim);

  // Fewer items than threads (a short decode row of few KV heads): an item a query head.
  const int32_t parts = static_cast<int64_t>(items.size()) < pool.num_threads() ? group : 1;
  const int32_t part_heads = group / parts;
  pool.ParallelFor(static_cast<int64_t>(items.size()) * parts, 1, [&](int64_t begin, int64_t end) {
    SplitScratch& scratch = ThreadScratch();
    scratch.Reserve(part_heads, head_dim, max_splits);
    for (int64_t unit = begin; unit < end; ++unit) {
      const SplitItem& item = items[unit / parts];
      const int32_t first_head = static_cast<int32_t>(unit % parts) * part_heads;
      const int32_t head = item.kv_head * group + first_head;
      const float* row_q = q + item.row * q_stride + int64_t{head} * head_dim;
      if (item.partial >= 0) {
        const int64_t at = item.partial + first_head;
        AttendSplit(row_q, part_heads, kv, item, scale, scratch, &partial_max[at], &partial_sum[at],
                    &partial_values[at * head_dim]);
        continue;
      }
      AttendSplit(row_q, part_heads, kv, item, scale, scratch, scratch.max.data(),
                  scratch.sum.data(), scratch.values.data());
      float* row_out = out + (int64_t{item.row} * num_heads + head) * head_dim;
      for (int32_t h = 0; h < part_heads; ++h) {
        MergeSplits(&scratch.max[h], &scratch.sum[h], &scratch.values[int64_t{h} * head_dim], 1, 1,
                    head_dim, scratch.weights.data(), row_out + int64_t{h} * head_dim);
      }
    }
  });
  if (merges.empty()) return;
  pool.ParallelFor(static_cast<int64_t>(merges.size()) * group, 1, [&](int64_t begin, int64_t end) {
    SplitScratch& scratch = ThreadScratch();
    scratch.Reserve(part_heads, head_dim, max_splits);
    for (int64_t m = begin; m < end; ++m) {
      const Merge& merge = merges[m / group];
      const SplitItem& first = items[merge.first_item];
      const int32_t h = static_cast<int32_t>(m % group);
      const int64_t at = first.partial + h;
      MergeSplits(&partial_max[at], &partial_sum[at], &partial_values[at * head_dim], merge.splits,
                  group, head_dim, scratch.weights.data(),
                  out + (int64_t{first.row} * num_heads + first.kv_head * group + h) * head_dim);
    }
  });
}

PULSE_CPU_KERNELS_END
