// Decode attention: one query row per sequence, GQA, split along the sequence (flash-decoding).
//
// A block serves one (sequence, KV head, tile of up to kGroupTile query heads of that KV head,
// split of the sequence), so each KV byte of a split is read once for all the query heads that
// share it. Within a block, a token's key row is read by kHeadDim / 8 lanes, 16 bytes each; a
// warp walks kTokensPerWarp tokens at a time, kUnroll steps deep, with keys and values of a whole
// chunk in flight before the first use. Each token slot keeps its own online softmax; slots,
// warps and then splits are merged by their log-sum-exp.
#include <algorithm>

#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"

namespace pulse::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kUnroll = 4;
constexpr int kMinSplitTokens = 256;
constexpr int kSplitRounding = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();

int32_t GroupTile(int32_t group) { return group <= 4 ? 4 : 8; }

// Merges (max_b, sum_b, acc_b) into (max_a, sum_a, acc_a); either may be empty (max -inf).
template <int kN>
__device__ __forceinline__ void Merge(float& max_a, float& sum_a, float (&acc_a)[kN], float max_b,
                                      float sum_b, const float (&acc_b)[kN]) {
  const float merged = fmaxf(max_a, max_b);
  if (merged == kNegInf) return;
  const float scale_a = exp2f(max_a - merged);
  const float scale_b = exp2f(max_b - merged);
  sum_a = sum_a * scale_a + sum_b * scale_b;
#pragma unroll
  for (int i = 0; i < kN; ++i) acc_a[i] = acc_a[i] * scale_a + acc_b[i] * scale_b;
  max_a = merged;
}

template <int kHeadDim, int kGroupTile>
__global__ void __launch_bounds__(kThreads)
    DecodeAttentionKernel(const float* __restrict__ q, int64_t q_stride, int32_t num_heads,
                          PagedKvBatch kv, float scale_log2, int32_t split_tokens,
                          float* __restrict__ partial_o, float* __restrict__ partial_lse,
                          bf16* __restrict__ out) {
  constexpr int kLanesPerToken = kHeadDim / 8;
  constexpr int kTokensPerWarp = kWarp / kLanesPerToken;
  constexpr int kChunk = kTokensPerWarp * kUnroll;
  __shared__ float shared_max[kWarps][kGroupTile];
  __shared__ float shared_sum[kWarps][kGroupTile];
  __shared__ float shared_acc[kWarps][kGroupTile][kHeadDim];

  const PagedKvLayout& layout = kv.layout;
  const int32_t seq = blockIdx.z;
  const int32_t kv_len = kv.kv_lens[seq];
  const int32_t begin = blockIdx.x * split_tokens;
  if (begin >= kv_len) return;
  const int32_t end = min(kv_len, begin + split_tokens);
  const int32_t group = num_heads / layout.num_kv_heads;
  const int32_t group_tiles = (group + kGroupTile - 1) / kGroupTile;
  const int32_t kv_head = blockIdx.y / group_tiles;
  const int32_t first_in_group = (blockIdx.y % group_tiles) * kGroupTile;
  const int32_t heads = min(kGroupTile, group - first_in_group);
  const int32_t first_head = kv_head * group + first_in_group;
  const int32_t row = kv.q_offsets[seq];

  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int slot = lane / kLanesPerToken;
  const int sub = lane % kLanesPerToken;
  const int dim0 = sub * 8;

  float query[kGroupTile][8];
#pragma unroll
  for (int g = 0; g < kGroupTile; ++g) {
    const float* src = q + row * q_stride + int64_t{first_head + g} * kHeadDim + dim0;
#pragma unroll
    for (int i = 0; i < 8; ++i) query[g][i] = g < heads ? src[i] * scale_log2 : 0.0f;
  }

  float running_max[kGroupTile];
  float running_sum[kGroupTile];
  float acc[kGroupTile][8];
#pragma unroll
  for (int g = 0; g < kGroupTile; ++g) {
    running_max[g] = kNegInf;
    running_sum[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }

  const bf16* blocks = static_cast<const bf16*>(kv.blocks);
  const int32_t* table = kv.block_tables + int64_t{seq} * kv.max_blocks_per_seq;
  const int64_t head_offset = int64_t{kv_head} * layout.head_elems() + dim0;
  for (int32_t chunk = begin + warp * kChunk; chunk < end; chunk += kWarps * kChunk) {
    Bf16x8 keys[kUnroll];
    Bf16x8 values[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t t = chunk + u * kTokensPerWarp + slot;
      if (t < end) {
        const bf16* key = blocks + table[t / layout.block_tokens] * layout.block_elems() +
                          head_offset + int64_t{t % layout.block_tokens} * kHeadDim;
        keys[u] = *reinterpret_cast<const Bf16x8*>(key);
        values[u] = *reinterpret_cast<const Bf16x8*>(key + layout.value_offset());
      } else {
        // Weighted by 0 below, but 0 * NaN is NaN: whatever the registers held must not stay.
        keys[u] = Bf16x8{};
        values[u] = Bf16x8{};
      }
    }
    float scores[kUnroll][kGroupTile];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[8];
      Unpack(keys[u], k);
#pragma unroll
      for (int g = 0; g < kGroupTile; ++g) {
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) partial = fmaf(query[g][i], k[i], partial);
#pragma unroll
        for (int offset = kLanesPerToken / 2; offset > 0; offset /= 2) {
          partial += __shfl_xor_sync(0xffffffffu, partial, offset);
        }
        const int32_t t = chunk + u * kTokensPerWarp + slot;
        scores[u][g] = t < end ? partial : kNegInf;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroupTile; ++g) {
      float chunk_max = scores[0][g];
#pragma unroll
      for (int u = 1; u < kUnroll; ++u) chunk_max = fmaxf(chunk_max, scores[u][g]);
      const float new_max = fmaxf(running_max[g], chunk_max);
      if (new_max == kNegInf) continue;
      const float rescale = exp2f(running_max[g] - new_max);
      running_sum[g] *= rescale;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= rescale;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = exp2f(scores[u][g] - new_max);
        running_sum[g] += p;
        float v[8];
        Unpack(values[u], v);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(p, v[i], acc[g][i]);
      }
      running_max[g] = new_max;
    }
  }

  // Merge the token slots of the warp (lanes with the same `sub`), then the warps.
#pragma unroll
  for (int offset = kLanesPerToken; offset < kWarp; offset *= 2) {
#pragma unroll
    for (int g = 0; g < kGroupTile; ++g) {
      const float other_max = __shfl_xor_sync(0xffffffffu, running_max[g], offset);
      const float other_sum = __shfl_xor_sync(0xffffffffu, running_sum[g], offset);
      float other_acc[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) other_acc[i] = __shfl_xor_sync(0xffffffffu, acc[g][i], offset);
      Merge(running_max[g], running_sum[g], acc[g], other_max, other_sum, other_acc);
    }
  }
  if (slot == 0) {
#pragma unroll
    for (int g = 0; g < kGroupTile; ++g) {
      if (sub == 0) {
        shared_max[warp][g] = running_max[g];
        shared_sum[warp][g] = running_sum[g];
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) shared_acc[warp][g][dim0 + i] = acc[g][i];
    }
  }
  __syncthreads();

  const int32_t splits = gridDim.x;
  for (int item = threadIdx.x; item < heads * kHeadDim; item += kThreads) {
    const int g = item / kHeadDim;
    const int d = item % kHeadDim;
    float max_all = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) max_all = fmaxf(max_all, shared_max[w][g]);
    float sum = 0.0f;
    float value = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (shared_max[w][g] == kNegInf) continue;
      const float scale = exp2f(shared_max[w][g] - max_all);
      sum += shared_sum[w][g] * scale;
      value += shared_acc[w][g][d] * scale;
    }
    const int64_t head_row = int64_t{row} * num_heads + first_head + g;
    if (splits == 1) {
      out[head_row * kHeadDim + d] = __float2bfloat16_rn(value / sum);
    } else {
      partial_o[(head_row * splits + blockIdx.x) * kHeadDim + d] = value / sum;
      if (d == 0) partial_lse[head_row * splits + blockIdx.x] = max_all + log2f(sum);
    }
  }
}

// Merges the splits of each (row, head): one block of head_dim threads.
__global__ void CombineSplitsKernel(PagedKvBatch kv, int32_t num_heads, int32_t head_dim,
                                    int32_t splits, int32_t split_tokens,
                                    const float* __restrict__ partial_o,
                                    const float* __restrict__ partial_lse, bf16* __restrict__ out) {
  const int32_t seq = blockIdx.x;
  const int32_t head = blockIdx.y;
  const int32_t row = kv.q_offsets[seq];
  const int32_t used = (kv.kv_lens[seq] + split_tokens - 1) / split_tokens;
  const int64_t head_row = int64_t{row} * num_heads + head;
  const float* lse = partial_lse + head_row * splits;
  float max_lse = kNegInf;
  for (int32_t s = 0; s < used; ++s) max_lse = fmaxf(max_lse, lse[s]);
  for (int32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    float value = 0.0f;
    for (int32_t s = 0; s < used; ++s) {
      const float weight = exp2f(lse[s] - max_lse);
      sum += weight;
      value += weight * partial_o[(head_row * splits + s) * head_dim + d];
    }
    out[head_row * head_dim + d] = __float2bfloat16_rn(value / sum);
  }
}

int32_t SplitTokens(int32_t max_kv_len, int32_t splits) {
  const int32_t per_split = (max_kv_len + splits - 1) / splits;
  return (per_split + kSplitRounding - 1) / kSplitRounding * kSplitRounding;
}

template <int kHeadDim, int kGroupTile>
cudaError_t Launch(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvBatch& kv,
                   float scale, int32_t splits, float* scratch, bf16* out, cudaStream_t stream) {
  const int32_t group = num_heads / kv.layout.num_kv_heads;
  const int32_t group_tiles = (group + kGroupTile - 1) / kGroupTile;
  const int32_t split_tokens = SplitTokens(kv.max_kv_len, splits);
  const int32_t used_splits = (kv.max_kv_len + split_tokens - 1) / split_tokens;
  float* partial_o = scratch;
  float* partial_lse = scratch + int64_t{kv.num_seqs} * num_heads * used_splits * kHeadDim;
  const dim3 grid(used_splits, kv.layout.num_kv_heads * group_tiles, kv.num_seqs);
  DecodeAttentionKernel<kHeadDim, kGroupTile><<<grid, kThreads, 0, stream>>>(
      q, q_stride, num_heads, kv, scale * kLog2e, split_tokens, partial_o, partial_lse, out);
  if (used_splits == 1) return cudaGetLastError();
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
  CombineSplitsKernel<<<dim3(kv.num_seqs, num_heads), kHeadDim, 0, stream>>>(
      kv, num_heads, kHeadDim, used_splits, split_tokens, partial_o, partial_lse, out);
  return cudaGetLastError();
}

}  // namespace

bool AttentionSupportsHeadDim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

int32_t DecodeAttentionSplits(const PagedKvBatch& kv, int32_t num_heads, int32_t sm_count) {
  const int32_t group = num_heads / kv.layout.num_kv_heads;
  const int64_t units = int64_t{kv.num_seqs} * kv.layout.num_kv_heads *
                        ((group + GroupTile(group) - 1) / GroupTile(group));
  // Enough blocks for two waves of four blocks an SM, but no split shorter than kMinSplitTokens.
  const int64_t wanted = (int64_t{sm_count} * 8 + units - 1) / units;
  const int64_t longest = (int64_t{kv.max_kv_len} + kMinSplitTokens - 1) / kMinSplitTokens;
  return static_cast<int32_t>(std::clamp<int64_t>(std::min(wanted, longest), 1, 1 << 16));
}

int64_t DecodeAttentionScratchFloats(const PagedKvBatch& kv, int32_t num_heads, int32_t splits) {
  return int64_t{kv.num_seqs} * num_heads * splits * (kv.layout.head_dim + 1);
}

cudaError_t LaunchDecodeAttention(const float* q, int64_t q_stride, int32_t num_heads,
                                  const PagedKvBatch& kv, float scale, int32_t splits,
                                  float* scratch, void* out, cudaStream_t stream) {
  if (kv.num_seqs == 0) return cudaSuccess;
  bf16* output = static_cast<bf16*>(out);
  const bool small_group = num_heads / kv.layout.num_kv_heads <= 4;
  switch (kv.layout.head_dim) {
    case 64:
      return small_group
                 ? Launch<64, 4>(q, q_stride, num_heads, kv, scale, splits, scratch, output, stream)
                 : Launch<64, 8>(q, q_stride, num_heads, kv, scale, splits, scratch, output,
                                 stream);
    case 128:
      return small_group ? Launch<128, 4>(q, q_stride, num_heads, kv, scale, splits, scratch,
                                          output, stream)
                         : Launch<128, 8>(q, q_stride, num_heads, kv, scale, splits, scratch,
                                          output, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace pulse::cuda
