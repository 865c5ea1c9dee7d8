// The paged KV cache as every attention kernel sees it, on every backend: one descriptor, so a
// kernel, its CPU reference and the block manager agree on where a token's key and value live.
#pragma once

#include <cstdint>

#include "core/backend/dtype.h"

namespace pulse {

// Shape of one block of the paged KV cache. A block holds `block_tokens` tokens of one layer:
// keys [num_kv_heads][block_tokens][head_dim] followed by values of the same shape, so one block
// is one contiguous chunk of block_elems() elements of `type`.
struct PagedKvLayout {
  int32_t block_tokens = 32;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  DType type = DType::kF32;

  PULSE_HOST_DEVICE int64_t head_elems() const { return int64_t{block_tokens} * head_dim; }
  PULSE_HOST_DEVICE int64_t block_elems() const { return 2 * int64_t{num_kv_heads} * head_elems(); }
  PULSE_HOST_DEVICE int64_t block_bytes() const {
    return block_elems() * static_cast<int64_t>(DTypeBytes(type));
  }
  // Elements from a block's keys of one head to its values of that head.
  PULSE_HOST_DEVICE int64_t value_offset() const { return int64_t{num_kv_heads} * head_elems(); }
};

// One layer's paged KV cache for a batch of sequences. Sequence s owns the query rows
// [q_offsets[s], q_offsets[s+1]) of the step's token array; those queries are the last
// (q_offsets[s+1] - q_offsets[s]) positions of its kv_lens[s] cached tokens, and attend causally.
// Logical block j of sequence s is block_tables[s * max_blocks_per_seq + j]. The arrays are in
// backend memory; the counts after them are on the host, for launch shapes.
//
// With table_heads == layout.num_kv_heads (head-wise sparse attention), every KV head of a
// sequence has its own block list and length: table row TableRow(s, h) = s * num_kv_heads + h
// indexes block_tables (rows of max_blocks_per_seq) and kv_lens. Only for batches of one query
// row a sequence (max_q_len == 1), which attends to every token of its rows.
struct PagedKvBatch {
  void* blocks = nullptr;  // block b starts layout.block_bytes() * b bytes in
  PagedKvLayout layout;
  int32_t num_seqs = 0;
  int32_t max_blocks_per_seq = 0;
  const int32_t* block_tables = nullptr;  // [num_seqs * max_blocks_per_seq]
  const int32_t* kv_lens = nullptr;       // [num_seqs]
  const int32_t* q_offsets = nullptr;     // [num_seqs + 1]
  int32_t num_rows = 0;                   // q_offsets[num_seqs]
  int32_t max_q_len = 0;                  // the most query rows of one sequence
  int32_t max_kv_len = 0;                 // at least the longest kv_lens[s] (launch shapes)
  int32_t table_heads = 1;                // 1, or layout.num_kv_heads: a table a KV head

  // The row of block_tables and kv_lens that sequence `seq`'s KV head `kv_head` reads.
  PULSE_HOST_DEVICE int64_t TableRow(int32_t seq, int32_t kv_head) const {
    return int64_t{seq} * table_heads + (table_heads == 1 ? 0 : kv_head);
  }
};

}  // namespace pulse
