// Appends the step's new keys and values (fp32 rows of the QKV projection) to their bf16 slots
// in the paged cache: one block per query row, threads over heads x head_dim (the kernel fused
// with the rotary embedding: a row's rotary pairs spread over several blocks).
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/launch.cuh"
#include "core/backend/cuda/rope.cuh"

namespace pulse::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRopeThreads = 128;

// Where query row `row`'s key goes: its sequence's slot for the row's position (head 0, channel
// 0); its value lies layout.value_offset() elements further. Called by every thread of the block
// (a multiple of 32 threads): the first warp finds the sequence, testing 32 offsets a load.
__device__ __forceinline__ bf16* KeySlot(const PagedKvBatch& kv, int32_t row) {
  __shared__ int32_t found_seq;
  if (threadIdx.x < kWarp) {
    // The last s with q_offsets[s] <= row: the count of s in [1, num_seqs) with that property.
    int32_t seq = 0;
    for (int32_t first = 1; first < kv.num_seqs; first += kWarp) {
      const int32_t s = first + static_cast<int32_t>(threadIdx.x);
      seq += __popc(__ballot_sync(0xffffffffu, s < kv.num_seqs && kv.q_offsets[s] <= row));
    }
    if (threadIdx.x == 0) found_seq = seq;
  }
  __syncthreads();
  const int32_t seq = found_seq;
  const int32_t q_len = kv.q_offsets[seq + 1] - kv.q_offsets[seq];
  const int64_t position = kv.kv_lens[seq] - q_len + (row - kv.q_offsets[seq]);
  const PagedKvLayout& layout = kv.layout;
  const int32_t block =
      kv.block_tables[int64_t{seq} * kv.max_blocks_per_seq + position / layout.block_tokens];
  return static_cast<bf16*>(kv.blocks) + block * layout.block_elems() +
         (position % layout.block_tokens) * layout.head_dim;
}

__global__ void AppendKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                               int64_t row_stride, PagedKvBatch kv) {
  WaitForPriorGrids();
  const int32_t row = blockIdx.x;
  bf16* keys = KeySlot(kv, row);
  const PagedKvLayout& layout = kv.layout;
  const int32_t width = layout.num_kv_heads * layout.head_dim;
  for (int32_t i = threadIdx.x; i < width; i += blockDim.x) {
    const int32_t head = i / layout.head_dim;
    const int32_t d = i % layout.head_dim;
    bf16* slot = keys + head * layout.head_elems() + d;
    slot[0] = __float2bfloat16_rn(k[row * row_stride + i]);
    slot[layout.value_offset()] = __float2bfloat16_rn(v[row * row_stride + i]);
  }
}

// Blocks (row, part) of a QKV row [num_heads q heads][kv heads k][kv heads v]: part p rotates
// the rotary pairs from p * blockDim.x on of the queries and keys in place as RopeKernel does,
// and writes the rotated keys and their values into the row's slot. A row's pairs are spread
// over RopeRowParts blocks: a decode step's few rows run a pair a thread, a prompt chunk's rows
// loop, computing each row's cos/sin once.
__global__ void RopeAppendKvKernel(float* __restrict__ qkv, int64_t row_stride, int32_t num_heads,
                                   const int32_t* __restrict__ positions,
                                   const float* __restrict__ inv_freq, PagedKvBatch kv) {
  WaitForPriorGrids();
  __shared__ float cos_table[kRopeMaxHalf];
  __shared__ float sin_table[kRopeMaxHalf];
  const int32_t row = blockIdx.x;
  const PagedKvLayout& layout = kv.layout;
  const int32_t head_dim = layout.head_dim;
  const int32_t half = head_dim / 2;
  const int32_t kv_heads = layout.num_kv_heads;
  const int32_t items = (num_heads + kv_heads) * half;
  const int32_t first_item = static_cast<int32_t>(blockIdx.y * blockDim.x);
  RopeTables(positions[row], inv_freq, half, cos_table, sin_table);
  // Block-uniform: only parts that reach the keys need their slot, and a part that loops over the
  // row may reach them from any first item.
  const int32_t part_stride = static_cast<int32_t>(gridDim.y * blockDim.x);
  const bool reaches_keys =
      part_stride < items || first_item + static_cast<int32_t>(blockDim.x) > num_heads * half;
  bf16* keys = reaches_keys ? KeySlot(kv, row) : nullptr;
  float* base = qkv + row * row_stride;
  for (int32_t item = first_item + static_cast<int32_t>(threadIdx.x); item < items;
       item += part_stride) {
    const int32_t head = item / half;
    const int32_t i = item % half;
    float* x1 = base + int64_t{head} * head_dim + i;
    float* x2 = x1 + half;
    const float2 rotated = RotatePair(*x1, *x2, cos_table, sin_table, i);
    *x1 = rotated.x;
    *x2 = rotated.y;
    if (head < num_heads) continue;
    const int32_t kv_head = head - num_heads;
    bf16* slot = keys + kv_head * layout.head_elems() + i;
    const float* value = base + int64_t{num_heads + kv_heads + kv_head} * head_dim + i;
    slot[0] = __float2bfloat16_rn(rotated.x);
    slot[half] = __float2bfloat16_rn(rotated.y);
    slot[layout.value_offset()] = __float2bfloat16_rn(value[0]);
    slot[layout.value_offset() + half] = __float2bfloat16_rn(value[half]);
  }
}

}  // namespace

cudaError_t LaunchAppendKv(const float* k, const float* v, int64_t row_stride,
                           const PagedKvBatch& kv, cudaStream_t stream) {
  if (kv.num_rows == 0) return cudaSuccess;
  return LaunchKernel(AppendKvKernel, static_cast<unsigned>(kv.num_rows), kThreads, 0, stream, k, v,
                      row_stride, kv);
}

cudaError_t LaunchRopeAppendKv(float* qkv, int64_t row_stride, int32_t num_heads,
                               const int32_t* positions, const float* inv_freq,
                               const PagedKvBatch& kv, cudaStream_t stream) {
  if (kv.num_rows == 0) return cudaSuccess;
  if (!RopeSupportsHeadDim(kv.layout.head_dim)) return cudaErrorInvalidValue;
  const int64_t items = int64_t{num_heads + kv.layout.num_kv_heads} * (kv.layout.head_dim / 2);
  const dim3 grid(static_cast<unsigned>(kv.num_rows),
                  static_cast<unsigned>(RopeRowParts(kv.num_rows, items, kRopeThreads)));
  return LaunchKernel(RopeAppendKvKernel, grid, kRopeThreads, 0, stream, qkv, row_stride, num_heads,
                      positions, inv_freq, kv);
}

}  // namespace pulse::cuda
