// Decode attention: one query row per sequence, GQA, split along the sequence (flash-decoding),
// on tensor cores.
//
// A block serves one (sequence, KV head, up to 16 query heads of its group, split of the
// sequence). The group's query heads are the rows of one m16 MMA tile, so each KV byte of the
// split is read once for all of them, and QK^T and PV run as mma.sync as in the prefill kernel
// (rows past the group are padding: tensor-core work is not what bounds decode). Each warp streams
// its own tiles of kTileKeys keys (warp w takes tiles w, w + kWarps, ...) from their paged blocks
// into its own two shared-memory stages with cp.async, so one tile's copy overlaps the previous
// tile's math and many loads are in flight per SM. The warps then merge their softmax states in
// shared memory; CombineSplitsKernel merges the splits by their log-sum-exp.
#include <algorithm>

#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/mma.cuh"

namespace pulse::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kRows = 16;  // query heads of one block: the MMA tile's rows
constexpr int kTileKeys = 32;
constexpr int kStages = 2;
constexpr int kMinSplitTokens = 256;
constexpr int kSplitRounding = kTileKeys * kWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();

template <int kHeadDim>
constexpr int SharedBytes() {
  // The Q tile, then each warp's stages of K and V tiles.
  return (kRows + kWarps * kStages * 2 * kTileKeys) * kHeadDim * 2;
}

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    DecodeAttentionKernel(const float* __restrict__ q, int64_t q_stride, int32_t num_heads,
                          PagedKvBatch kv, float scale_log2, int32_t split_tokens,
                          float* __restrict__ partial_o, float* __restrict__ partial_lse,
                          bf16* __restrict__ out) {
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kDimSteps = kHeadDim / 16;   // k-steps of QK^T
  constexpr int kDimTiles = kHeadDim / 8;    // n-tiles of O
  constexpr int kKeyTiles = kTileKeys / 8;   // n-tiles of S
  constexpr int kKeySteps = kTileKeys / 16;  // k-steps of PV
  constexpr int kTileElems = kTileKeys * kHeadDim;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared_bytes);
  bf16* stages = q_tile + kRows * kHeadDim;  // [kWarps][kStages][K, V][kTileKeys][kHeadDim]

  const PagedKvLayout& layout = kv.layout;
  const int32_t seq = blockIdx.z;
  const int32_t kv_len = kv.kv_lens[seq];
  const int32_t begin = blockIdx.x * split_tokens;
  if (begin >= kv_len) return;
  const int32_t end = min(kv_len, begin + split_tokens);
  const int32_t group = num_heads / layout.num_kv_heads;
  const int32_t row_tiles = (group + kRows - 1) / kRows;
  const int32_t kv_head = blockIdx.y / row_tiles;
  const int32_t first_in_group = (blockIdx.y % row_tiles) * kRows;
  const int32_t heads = min(kRows, group - first_in_group);
  const int32_t first_head = kv_head * group + first_in_group;
  const int32_t row = kv.q_offsets[seq];
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;

  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks;
    const int chunk = c % kChunks;
    float values[8] = {};
    if (r < heads) {
      const float4* src = reinterpret_cast<const float4*>(
          q + int64_t{row} * q_stride + int64_t{first_head + r} * kHeadDim + chunk * 8);
      const float4 a = src[0];
      const float4 b = src[1];
      values[0] = a.x, values[1] = a.y, values[2] = a.z, values[3] = a.w;
      values[4] = b.x, values[5] = b.y, values[6] = b.z, values[7] = b.w;
    }
    *reinterpret_cast<Bf16x8*>(q_tile + SwizzledOffset<kHeadDim>(r, chunk)) = Pack(values);
  }
  __syncthreads();
  uint32_t q_frag[kDimSteps][4];
  {
    const int r = (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      LoadMatrixX4(q_frag[ks],
                   SharedAddress(q_tile + SwizzledOffset<kHeadDim>(r, ks * 2 + lane / 16)));
    }
  }

  const bf16* blocks = static_cast<const bf16*>(kv.blocks);
  const int32_t* table = kv.block_tables + int64_t{seq} * kv.max_blocks_per_seq;
  const int64_t head_offset = int64_t{kv_head} * layout.head_elems();
  bf16* own_stages = stages + warp * kStages * 2 * kTileElems;
  // This warp's copy of keys [first_key, first_key + kTileKeys) into `stage` (zeros past end).
  const auto load_tile = [&](int32_t first_key, int stage) {
    bf16* k_dst = own_stages + stage * 2 * kTileElems;
    bf16* v_dst = k_dst + kTileElems;
    for (int c = lane; c < kTileKeys * kChunks; c += kWarp) {
      const int r = c / kChunks;
      const int chunk = c % kChunks;
      const int32_t key = first_key + r;
      const bool valid = key < end;
      const bf16* src = blocks;
      if (valid) {
        src = blocks + table[key / layout.block_tokens] * layout.block_elems() + head_offset +
              int64_t{key % layout.block_tokens} * kHeadDim + chunk * 8;
      }
      const int offset = SwizzledOffset<kHeadDim>(r, chunk);
      CopyAsync16(SharedAddress(k_dst + offset), src, valid);
      CopyAsync16(SharedAddress(v_dst + offset), valid ? src + layout.value_offset() : src, valid);
    }
    CopyAsyncCommit();
  };

  float o_acc[kDimTiles][4];
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[n][i] = 0.0f;
  }
  float row_max[2] = {kNegInf, kNegInf};  // rows lane / 4 and lane / 4 + 8
  float row_sum[2] = {0.0f, 0.0f};
  const int32_t tiles = (end - begin + kTileKeys - 1) / kTileKeys;
  int stage = 0;
  if (warp < tiles) load_tile(begin + warp * kTileKeys, stage);
  for (int32_t tile = warp; tile < tiles; tile += kWarps) {
    if (tile + kWarps < tiles) {
      load_tile(begin + (tile + kWarps) * kTileKeys, stage ^ 1);
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncwarp();  // every lane's copies of this stage have landed
    const bf16* k_tile = own_stages + stage * 2 * kTileElems;
    const bf16* v_tile = k_tile + kTileElems;

    float s[kKeyTiles][4];
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
    }
#pragma unroll
    for (int pair = 0; pair < kKeyTiles / 2; ++pair) {
      const int r = pair * 16 + (lane % 8) + (lane / 16) * 8;
#pragma unroll
      for (int ks = 0; ks < kDimSteps; ++ks) {
        uint32_t b[4];
        LoadMatrixX4(b,
                     SharedAddress(k_tile + SwizzledOffset<kHeadDim>(r, ks * 2 + (lane / 8) % 2)));
        MmaBf16(s[2 * pair], q_frag[ks], b[0], b[1]);
        MmaBf16(s[2 * pair + 1], q_frag[ks], b[2], b[3]);
      }
    }
    // Every tile holds at least one key before `end`, so no row's maximum stays -inf.
    const int32_t first_key = begin + tile * kTileKeys;
    float tile_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int32_t key = first_key + n * 8 + (lane % 4) * 2 + i % 2;
        s[n][i] = key < end ? s[n][i] * scale_log2 : kNegInf;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], s[n][i]);
      }
    }
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      rescale[r] = exp2f(row_max[r] - new_max);
      row_max[r] = new_max;
      row_sum[r] *= rescale[r];
    }
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[n][i] = exp2f(s[n][i] - row_max[i / 2]);
        row_sum[i / 2] += s[n][i];
      }
    }
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o_acc[n][i] *= rescale[i / 2];
    }
#pragma unroll
    for (int ks = 0; ks < kKeySteps; ++ks) {
      const uint32_t p[4] = {PackBf16(s[2 * ks][0], s[2 * ks][1]),
                             PackBf16(s[2 * ks][2], s[2 * ks][3]),
                             PackBf16(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                             PackBf16(s[2 * ks + 1][2], s[2 * ks + 1][3])};
      const int r = ks * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int pair = 0; pair < kDimTiles / 2; ++pair) {
        uint32_t b[4];
        LoadMatrixX4Trans(
            b, SharedAddress(v_tile + SwizzledOffset<kHeadDim>(r, pair * 2 + lane / 16)));
        MmaBf16(o_acc[2 * pair], p, b[0], b[1]);
        MmaBf16(o_acc[2 * pair + 1], p, b[2], b[3]);
      }
    }
    __syncwarp();  // the next iteration's copy overwrites the stage read here
    stage ^= 1;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }

  // Merge the warps (a warp without tiles has max -inf and adds nothing) in the stages' memory.
  __syncthreads();
  float* merge_max = reinterpret_cast<float*>(stages);  // [kWarps][kRows]
  float* merge_sum = merge_max + kWarps * kRows;        // [kWarps][kRows]
  float* merge_o = merge_sum + kWarps * kRows;          // [kWarps][kRows][kHeadDim]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int tile_row = lane / 4 + r * 8;
    if (lane % 4 == 0) {
      merge_max[warp * kRows + tile_row] = row_max[r];
      merge_sum[warp * kRows + tile_row] = row_sum[r];
    }
    float* dst = merge_o + (warp * kRows + tile_row) * kHeadDim + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {
      dst[n * 8] = o_acc[n][2 * r];
      dst[n * 8 + 1] = o_acc[n][2 * r + 1];
    }
  }
  __syncthreads();
  const int32_t splits = gridDim.x;
  for (int item = tid; item < heads * kHeadDim; item += kThreads) {
    const int r = item / kHeadDim;
    const int d = item % kHeadDim;
    float max_all = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) max_all = fmaxf(max_all, merge_max[w * kRows + r]);
    float sum = 0.0f;
    float value = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float warp_max = merge_max[w * kRows + r];
      if (warp_max == kNegInf) continue;
      const float scale = exp2f(warp_max - max_all);
      sum += merge_sum[w * kRows + r] * scale;
      value += merge_o[(w * kRows + r) * kHeadDim + d] * scale;
    }
    const int64_t head_row = int64_t{row} * num_heads + first_head + r;
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

int32_t RowTiles(int32_t num_heads, const PagedKvLayout& layout) {
  return (num_heads / layout.num_kv_heads + kRows - 1) / kRows;
}

int32_t SplitTokens(int32_t max_kv_len, int32_t splits) {
  const int32_t per_split = (max_kv_len + splits - 1) / splits;
  return (per_split + kSplitRounding - 1) / kSplitRounding * kSplitRounding;
}

template <int kHeadDim>
cudaError_t Launch(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvBatch& kv,
                   float scale, int32_t splits, float* scratch, bf16* out, cudaStream_t stream) {
  constexpr int kShared = SharedBytes<kHeadDim>();
  static const cudaError_t configured = cudaFuncSetAttribute(
      DecodeAttentionKernel<kHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  if (configured != cudaSuccess) return configured;
  const int32_t split_tokens = SplitTokens(kv.max_kv_len, splits);
  const int32_t used_splits = (kv.max_kv_len + split_tokens - 1) / split_tokens;
  float* partial_o = scratch;
  float* partial_lse = scratch + int64_t{kv.num_seqs} * num_heads * used_splits * kHeadDim;
  const dim3 grid(used_splits, kv.layout.num_kv_heads * RowTiles(num_heads, kv.layout),
                  kv.num_seqs);
  DecodeAttentionKernel<kHeadDim><<<grid, kThreads, kShared, stream>>>(
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
  const int64_t units =
      int64_t{kv.num_seqs} * kv.layout.num_kv_heads * RowTiles(num_heads, kv.layout);
  // Several waves of blocks (a block fills most of an SM's shared memory), but no split shorter
  // than kMinSplitTokens.
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
  switch (kv.layout.head_dim) {
    case 64:
      return Launch<64>(q, q_stride, num_heads, kv, scale, splits, scratch, output, stream);
    case 128:
      return Launch<128>(q, q_stride, num_heads, kv, scale, splits, scratch, output, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace pulse::cuda
