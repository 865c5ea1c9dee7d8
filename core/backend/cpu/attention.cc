#include "core/backend/cpu/attention.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>
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

// Calls fn(token, key) for tokens 0..last of one sequence's kv head, in order.
template <typename Fn>
void ForEachKey(const PagedKvBatch& kv, int32_t seq, int32_t kv_head, int64_t last, Fn fn) {
  const int32_t block_tokens = kv.layout.block_tokens;
  const int32_t head_dim = kv.layout.head_dim;
  for (int64_t first = 0, block = 0; first <= last; first += block_tokens, ++block) {
    const float* key = HeadKeys(kv, seq, block, kv_head);
    const int64_t end = std::min<int64_t>(first + block_tokens, last + 1);
    for (int64_t t = first; t < end; ++t, key += head_dim) fn(t, key);
  }
}

// Dimensions of the value sum kept in registers at once.
constexpr int32_t kValueChunk = 4 * kLanes;

// out[d] = (sum_t p[t] * value_t[d]) * inv_sum for d in [d0, d0 + width), summing over keys in
// order; a full chunk accumulates in registers.
void WeightedValues(const PagedKvBatch& kv, int32_t seq, int32_t kv_head, int64_t position,
                    const float* p, int32_t d0, int32_t width, float inv_sum, float* out) {
  const int64_t value_offset = kv.layout.value_offset() + d0;
  if (width == kValueChunk) {
    Vec acc[kValueChunk / kLanes] = {};
    ForEachKey(kv, seq, kv_head, position, [&](int64_t t, const float* key) {
      const Vec weight = Splat(p[t]);
#pragma GCC unroll 4
      for (int c = 0; c < kValueChunk / kLanes; ++c) {
        acc[c] = MulAdd(weight, LoadVec(key + value_offset + int64_t{c} * kLanes), acc[c]);
      }
    });
    for (int c = 0; c < kValueChunk / kLanes; ++c) {
      for (int l = 0; l < kLanes; ++l) out[d0 + c * kLanes + l] = acc[c][l] * inv_sum;
    }
    return;
  }
  float acc[kValueChunk] = {};
  ForEachKey(kv, seq, kv_head, position, [&](int64_t t, const float* key) {
    for (int32_t d = 0; d < width; ++d) acc[d] = MulAdd(p[t], key[value_offset + d], acc[d]);
  });
  for (int32_t d = 0; d < width; ++d) out[d0 + d] = acc[d] * inv_sum;
}

// Scores and weighted values of one query head against keys 0..position.
void AttendOneHead(const float* query, const PagedKvBatch& kv, int32_t seq, int32_t kv_head,
                   int64_t position, float scale, float* scores, float* out) {
  const int32_t head_dim = kv.layout.head_dim;
  float max_score = -std::numeric_limits<float>::infinity();
  ForEachKey(kv, seq, kv_head, position, [&](int64_t t, const float* key) {
    scores[t] = Dot(query, key, head_dim) * scale;
    max_score = std::max(max_score, scores[t]);
  });
  const int64_t count = position + 1;
  for (int64_t t = 0; t < count; ++t) scores[t] = Exp(scores[t] - max_score);
  const float inv_sum = 1.0f / Sum(scores, count);
  for (int32_t d0 = 0; d0 < head_dim; d0 += kValueChunk) {
    WeightedValues(kv, seq, kv_head, position, scores, d0, std::min(kValueChunk, head_dim - d0),
                   inv_sum, out);
  }
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
  assert(layout.num_kv_heads > 0 && num_heads % layout.num_kv_heads == 0);
  assert(kv.table_heads == 1 || kv.max_q_len <= 1);
  const int32_t group = num_heads / layout.num_kv_heads;
  const int32_t rows = kv.num_rows;
  std::vector<int32_t> row_seq(rows);
  for (int32_t s = 0; s < kv.num_seqs; ++s) {
    std::fill(row_seq.begin() + kv.q_offsets[s], row_seq.begin() + kv.q_offsets[s + 1], s);
  }
  int32_t max_kv_len = 0;
  for (int64_t r = 0; r < int64_t{kv.num_seqs} * kv.table_heads; ++r) {
    max_kv_len = std::max(max_kv_len, kv.kv_lens[r]);
  }

  pool.ParallelFor(int64_t{rows} * num_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(max_kv_len);
    for (int64_t item = begin; item < end; ++item) {
      const int32_t row = static_cast<int32_t>(item / num_heads);
      const int32_t head = static_cast<int32_t>(item % num_heads);
      const int32_t seq = row_seq[row];
      const int32_t q_len = kv.q_offsets[seq + 1] - kv.q_offsets[seq];
      const int32_t kv_head = head / group;
      const int64_t position =
          kv.kv_lens[kv.TableRow(seq, kv_head)] - q_len + (row - kv.q_offsets[seq]);
      AttendOneHead(q + row * q_stride + int64_t{head} * head_dim, kv, seq, kv_head, position,
                    scale, scores.data(), out + (int64_t{row} * num_heads + head) * head_dim);
    }
  });
}

PULSE_CPU_KERNELS_END
