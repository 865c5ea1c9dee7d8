// Decode attention: one query row per sequence, GQA, split along the sequence (flash-decoding),
// on tensor cores.
//
// A block serves one (sequence, KV head, up to 8 query heads of its group, split of the
// sequence), so each KV byte of the split is read once for all of them. The products run
// transposed, keys and head dims as the MMA's 16 rows and the group's heads as its 8 columns:
// S^T = K Q^T, then O^T += V^T P^T, with P^T moved from accumulator to operand layout by movmatrix.
// So a small group wastes little of the tile and the accumulators stay few (32 a lane for
// head_dim 128), which leaves room for three blocks, 12 warps, an SM: decode is latency-bound,
// and warps are what hide it. Each warp streams its own tiles of kTileKeys keys (warp w takes
// tiles w, w + kWarps, ...) from their paged blocks into its own two shared-memory stages with
// cp.async, so one tile's copy overlaps the previous tile's math. The warps then merge their
// softmax states in shared memory; CombineSplitsKernel merges the splits by log-sum-exp.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/launch.cuh"
#include "core/backend/cuda/mma.cuh"

namespace pulse::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kHeadsPerBlock = 8;  // the MMA tile's columns
constexpr int kTileKeys = 16;      // the MMA tile's rows
constexpr int kStages = 2;
constexpr int kMinSplitTokens = 256;
constexpr int kMaxSplits = 8192;  // CombineSplitsKernel keeps a float a split in shared memory
constexpr int kSplitRounding = kTileKeys * kWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();

template <int kHeadDim>
constexpr int SharedBytes() {
  // The Q tile, then each warp's stages of K and V tiles.
  return (kHeadsPerBlock + kWarps * kStages * 2 * kTileKeys) * kHeadDim * 2;
}

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    DecodeAttentionKernel(const float* __restrict__ q, int64_t q_stride, int32_t num_heads,
                          PagedKvBatch kv, float scale_log2, int32_t split_tokens,
                          float* __restrict__ partial_o, float* __restrict__ partial_lse,
                          bf16* __restrict__ out) {
  WaitForPriorGrids();
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kDimSteps = kHeadDim / 16;  // k-steps of S^T, m-tiles of O^T
  constexpr int kTileElems = kTileKeys * kHeadDim;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared_bytes);
  bf16* stages = q_tile + kHeadsPerBlock * kHeadDim;  // [kWarps][kStages][K, V][kTileKeys][dim]

  const PagedKvLayout& layout = kv.layout;
  const int32_t seq = blockIdx.z;
  const int32_t group = num_heads / layout.num_kv_heads;
  const int32_t head_tiles = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const int32_t kv_head = blockIdx.y / head_tiles;
  const int64_t table_row = kv.TableRow(seq, kv_head);
  const int32_t kv_len = kv.kv_lens[table_row];
  const int32_t begin = blockIdx.x * split_tokens;
  if (begin >= kv_len) return;
  const int32_t end = min(kv_len, begin + split_tokens);
  const int32_t first_in_group = (blockIdx.y % head_tiles) * kHeadsPerBlock;
  const int32_t heads = min(kHeadsPerBlock, group - first_in_group);
  const int32_t first_head = kv_head * group + first_in_group;
  const int32_t row = kv.q_offsets[seq];
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;

  for (int c = tid; c < kHeadsPerBlock * kChunks; c += kThreads) {
    const int h = c / kChunks;
    const int chunk = c % kChunks;
    float values[8] = {};
    if (h < heads) {
      const float4* src = reinterpret_cast<const float4*>(
          q + int64_t{row} * q_stride + int64_t{first_head + h} * kHeadDim + chunk * 8);
      const float4 a = src[0];
      const float4 b = src[1];
      values[0] = a.x, values[1] = a.y, values[2] = a.z, values[3] = a.w;
      values[4] = b.x, values[5] = b.y, values[6] = b.z, values[7] = b.w;
    }
    *reinterpret_cast<Bf16x8*>(q_tile + SwizzledOffset<kHeadDim>(h, chunk)) = Pack(values);
  }
  __syncthreads();
  // Q^T as the B operand of every k-step: one ldmatrix.x4 covers two k-steps (lane l gives head
  // row l % 8 of the 8-dim chunk 4 p + l / 8).
  uint32_t q_frag[kDimSteps][2];
#pragma unroll
  for (int p = 0; p < kDimSteps / 2; ++p) {
    uint32_t r[4];
    LoadMatrixX4(r, SharedAddress(q_tile + SwizzledOffset<kHeadDim>(lane % 8, 4 * p + lane / 8)));
    q_frag[2 * p][0] = r[0];
    q_frag[2 * p][1] = r[1];
    q_frag[2 * p + 1][0] = r[2];
    q_frag[2 * p + 1][1] = r[3];
  }

  const bf16* blocks = static_cast<const bf16*>(kv.blocks);
  const int32_t* table = kv.block_tables + table_row * kv.max_blocks_per_seq;
  const int64_t head_offset = int64_t{kv_head} * layout.head_elems();
  bf16* own_stages = stages + warp * kStages * 2 * kTileElems;
  // This warp's copy of keys [first_key, first_key + kTileKeys) into `stage` (zeros past end).
  const auto load_tile = [&](int32_t first_key, int stage) {
    bf16* k_dst = own_stages + stage * 2 * kTileElems;
    bf16* v_dst = k_dst + kTileElems;
#pragma unroll
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

  // O^T: m-tile m is head dims [16 m, 16 m + 16); a lane holds dims 16 m + lane / 4 (+ 8) of
  // heads 2 (lane % 4) and 2 (lane % 4) + 1, the lane's two heads (index j below).
  float o_acc[kDimSteps][4];
#pragma unroll
  for (int m = 0; m < kDimSteps; ++m) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[m][i] = 0.0f;
  }
  float head_max[2] = {kNegInf, kNegInf};
  float head_sum[2] = {0.0f, 0.0f};
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

    // S^T [keys][heads]: s[0], s[1] are key lane / 4 for the lane's two heads, s[2], s[3] key
    // lane / 4 + 8.
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      uint32_t a[4];
      LoadMatrixX4(
          a, SharedAddress(k_tile + SwizzledOffset<kHeadDim>((lane % 8) + ((lane / 8) % 2) * 8,
                                                             ks * 2 + lane / 16)));
      MmaBf16(s, a, q_frag[ks][0], q_frag[ks][1]);
    }
    const int32_t key = begin + tile * kTileKeys + lane / 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] = key + (i / 2) * 8 < end ? s[i] * scale_log2 : kNegInf;
    // The tile's first key is before `end`, so every head's maximum is finite.
    float p[4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float tile_max = fmaxf(s[j], s[j + 2]);
#pragma unroll
      for (int offset = 4; offset < kWarp; offset *= 2) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
      }
      const float new_max = fmaxf(head_max[j], tile_max);
      const float rescale = exp2f(head_max[j] - new_max);
      head_max[j] = new_max;
      p[j] = exp2f(s[j] - new_max);
      p[j + 2] = exp2f(s[j + 2] - new_max);
      head_sum[j] = head_sum[j] * rescale + p[j] + p[j + 2];
#pragma unroll
      for (int m = 0; m < kDimSteps; ++m) {
        o_acc[m][j] *= rescale;
        o_acc[m][j + 2] *= rescale;
      }
    }
    // P^T [keys][heads] in accumulator layout, transposed into the B operand [heads][keys].
    const uint32_t b0 = TransposeMatrix(PackBf16(p[0], p[1]));  // keys 0..7
    const uint32_t b1 = TransposeMatrix(PackBf16(p[2], p[3]));  // keys 8..15
#pragma unroll
    for (int m = 0; m < kDimSteps; ++m) {
      uint32_t a[4];
      LoadMatrixX4Trans(
          a, SharedAddress(v_tile + SwizzledOffset<kHeadDim>((lane % 8) + (lane / 16) * 8,
                                                             m * 2 + (lane / 8) % 2)));
      MmaBf16(o_acc[m], a, b0, b1);
    }
    __syncwarp();  // the next iteration's copy overwrites the stage read here
    stage ^= 1;
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int offset = 4; offset < kWarp; offset *= 2) {
      head_sum[j] += __shfl_xor_sync(0xffffffffu, head_sum[j], offset);
    }
  }

  // Merge the warps (a warp without tiles has max -inf and adds nothing) in the stages' memory.
  __syncthreads();
  float* merge_max = reinterpret_cast<float*>(stages);     // [kWarps][kHeadsPerBlock]
  float* merge_sum = merge_max + kWarps * kHeadsPerBlock;  // [kWarps][kHeadsPerBlock]
  float* merge_o = merge_sum + kWarps * kHeadsPerBlock;    // [kWarps][kHeadsPerBlock][dim]
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int h = 2 * (lane % 4) + j;
    if (lane < 4) {
      merge_max[warp * kHeadsPerBlock + h] = head_max[j];
      merge_sum[warp * kHeadsPerBlock + h] = head_sum[j];
    }
    float* dst = merge_o + (warp * kHeadsPerBlock + h) * kHeadDim + lane / 4;
#pragma unroll
    for (int m = 0; m < kDimSteps; ++m) {
      dst[m * 16] = o_acc[m][j];
      dst[m * 16 + 8] = o_acc[m][j + 2];
    }
  }
  __syncthreads();
  const int32_t splits = gridDim.x;
  for (int item = tid; item < heads * kHeadDim; item += kThreads) {
    const int h = item / kHeadDim;
    const int d = item % kHeadDim;
    float max_all = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) max_all = fmaxf(max_all, merge_max[w * kHeadsPerBlock + h]);
    float sum = 0.0f;
    float value = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float warp_max = merge_max[w * kHeadsPerBlock + h];
      if (warp_max == kNegInf) continue;
      const float scale = exp2f(warp_max - max_all);
      sum += merge_sum[w * kHeadsPerBlock + h] * scale;
      value += merge_o[(w * kHeadsPerBlock + h) * kHeadDim + d] * scale;
    }
    const int64_t head_row = int64_t{row} * num_heads + first_head + h;
    if (splits == 1) {
      out[head_row * kHeadDim + d] = __float2bfloat16_rn(value / sum);
    } else {
      partial_o[(head_row * splits + blockIdx.x) * kHeadDim + d] = value / sum;
      if (d == 0) partial_lse[head_row * splits + blockIdx.x] = max_all + log2f(sum);
    }
  }
}

// Merges the splits of each (row, head): one block of head_dim threads. The splits' log-sum-exps
// are read once, in parallel, into shared memory (`lse_shared`, a float a split); the loads of
// the partial outputs do not depend on each other and are unrolled so that several are in flight.
__global__ void CombineSplitsKernel(PagedKvBatch kv, int32_t num_heads, int32_t head_dim,
                                    int32_t splits, int32_t split_tokens,
                                    const float* __restrict__ partial_o,
                                    const float* __restrict__ partial_lse, bf16* __restrict__ out) {
  WaitForPriorGrids();
  extern __shared__ float lse_shared[];
  const int32_t seq = blockIdx.x;
  const int32_t head = blockIdx.y;
  const int32_t row = kv.q_offsets[seq];
  const int32_t kv_head = head / (num_heads / kv.layout.num_kv_heads);
  const int32_t used = (kv.kv_lens[kv.TableRow(seq, kv_head)] + split_tokens - 1) / split_tokens;
  const int64_t head_row = int64_t{row} * num_heads + head;
  for (int32_t s = threadIdx.x; s < used; s += blockDim.x) {
    lse_shared[s] = partial_lse[head_row * splits + s];
  }
  __syncthreads();
  float max_lse = kNegInf;
  for (int32_t s = 0; s < used; ++s) max_lse = fmaxf(max_lse, lse_shared[s]);
  const float* o = partial_o + head_row * splits * head_dim;
  for (int32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    float value = 0.0f;
#pragma unroll 8
    for (int32_t s = 0; s < used; ++s) {
      const float weight = exp2f(lse_shared[s] - max_lse);
      sum += weight;
      value += weight * o[int64_t{s} * head_dim + d];
    }
    out[head_row * head_dim + d] = __float2bfloat16_rn(value / sum);
  }
}

int32_t HeadTiles(int32_t num_heads, const PagedKvLayout& layout) {
  return (num_heads / layout.num_kv_heads + kHeadsPerBlock - 1) / kHeadsPerBlock;
}

int32_t SplitTokens(int32_t max_kv_len, int32_t splits) {
  const int32_t per_split = (max_kv_len + splits - 1) / splits;
  return (per_split + kSplitRounding - 1) / kSplitRounding * kSplitRounding;
}

// Lets the kernel for kHeadDim use its shared memory (once).
template <int kHeadDim>
cudaError_t Configure() {
  static const cudaError_t configured =
      cudaFuncSetAttribute(DecodeAttentionKernel<kHeadDim>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, SharedBytes<kHeadDim>());
  return configured;
}

template <int kHeadDim>
absl::StatusOr<int32_t> BlocksPerSm() {
  PULSE_CUDA_RETURN_IF_ERROR(Configure<kHeadDim>());
  int blocks = 0;
  PULSE_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, DecodeAttentionKernel<kHeadDim>, kThreads, SharedBytes<kHeadDim>()));
  return std::max(blocks, 1);
}

template <int kHeadDim>
cudaError_t Launch(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvBatch& kv,
                   float scale, int32_t splits, float* scratch, bf16* out, cudaStream_t stream) {
  constexpr int kShared = SharedBytes<kHeadDim>();
  if (const cudaError_t configured = Configure<kHeadDim>(); configured != cudaSuccess) {
    return configured;
  }
  const int32_t split_tokens = SplitTokens(kv.max_kv_len, splits);
  const int32_t used_splits = (kv.max_kv_len + split_tokens - 1) / split_tokens;
  float* partial_o = scratch;
  float* partial_lse = scratch + int64_t{kv.num_seqs} * num_heads * used_splits * kHeadDim;
  const dim3 grid(used_splits, kv.layout.num_kv_heads * HeadTiles(num_heads, kv.layout),
                  kv.num_seqs);
  const cudaError_t launched =
      LaunchKernel(DecodeAttentionKernel<kHeadDim>, grid, kThreads, kShared, stream, q, q_stride,
                   num_heads, kv, scale * kLog2e, split_tokens, partial_o, partial_lse, out);
  if (used_splits == 1 || launched != cudaSuccess) return launched;
  return LaunchKernel(CombineSplitsKernel, dim3(kv.num_seqs, num_heads), kHeadDim,
                      used_splits * sizeof(float), stream, kv, num_heads, kHeadDim, used_splits,
                      split_tokens, partial_o, partial_lse, out);
}

}  // namespace

bool AttentionSupportsHeadDim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

int32_t DecodeAttentionSplits(const PagedKvBatch& kv, int32_t num_heads, int64_t resident_blocks,
                              int64_t max_blocks) {
  const int64_t units = std::max<int64_t>(
      1, int64_t{kv.num_seqs} * kv.layout.num_kv_heads * HeadTiles(num_heads, kv.layout));
  const int64_t resident = std::max<int64_t>(1, resident_blocks);
  const int64_t longest = (int64_t{kv.max_kv_len} + kMinSplitTokens - 1) / kMinSplitTokens;
  const int64_t limit =
      std::clamp<int64_t>(std::min((max_blocks + units - 1) / units, longest), 1, kMaxSplits);
  // The fill of the last wave, blocks / (waves * resident), compared as a fraction.
  int64_t best = 1;
  int64_t best_blocks = units;
  int64_t best_capacity = (units + resident - 1) / resident * resident;
  for (int64_t splits = 2; splits <= limit; ++splits) {
    const int64_t blocks = units * splits;
    const int64_t capacity = (blocks + resident - 1) / resident * resident;
    if (blocks * best_capacity > best_blocks * capacity) {
      best = splits;
      best_blocks = blocks;
      best_capacity = capacity;
    }
  }
  return static_cast<int32_t>(best);
}

absl::StatusOr<int32_t> DecodeAttentionBlocksPerSm(int32_t head_dim) {
  switch (head_dim) {
    case 64:
      return BlocksPerSm<64>();
    case 128:
      return BlocksPerSm<128>();
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("decode attention has no kernel for head_dim %d", head_dim));
  }
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
