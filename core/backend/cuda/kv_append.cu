// Appends the step's new keys and values (fp32 rows of the QKV projection) to their bf16 slots
// in the paged cache: one block per query row, threads over heads x head_dim.
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"

namespace pulse::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void AppendKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                               int64_t row_stride, PagedKvBatch kv) {
  const int32_t row = blockIdx.x;
  // The sequence owning this row: the last s with q_offsets[s] <= row.
  int32_t seq = 0;
  while (seq + 1 < kv.num_seqs && kv.q_offsets[seq + 1] <= row) ++seq;
  const int32_t q_len = kv.q_offsets[seq + 1] - kv.q_offsets[seq];
  const int64_t position = kv.kv_lens[seq] - q_len + (row - kv.q_offsets[seq]);
  const PagedKvLayout& layout = kv.layout;
  const int32_t block =
      kv.block_tables[int64_t{seq} * kv.max_blocks_per_seq + position / layout.block_tokens];
  bf16* keys = static_cast<bf16*>(kv.blocks) + block * layout.block_elems() +
               (position % layout.block_tokens) * layout.head_dim;
  const int32_t width = layout.num_kv_heads * layout.head_dim;
  for (int32_t i = threadIdx.x; i < width; i += blockDim.x) {
    const int32_t head = i / layout.head_dim;
    const int32_t d = i % layout.head_dim;
    bf16* slot = keys + head * layout.head_elems() + d;
    slot[0] = __float2bfloat16_rn(k[row * row_stride + i]);
    slot[layout.value_offset()] = __float2bfloat16_rn(v[row * row_stride + i]);
  }
}

}  // namespace

cudaError_t LaunchAppendKv(const float* k, const float* v, int64_t row_stride,
                           const PagedKvBatch& kv, cudaStream_t stream) {
  if (kv.num_rows == 0) return cudaSuccess;
  AppendKvKernel<<<static_cast<unsigned>(kv.num_rows), kThreads, 0, stream>>>(k, v, row_stride, kv);
  return cudaGetLastError();
}

}  // namespace pulse::cuda
