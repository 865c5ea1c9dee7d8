// Causal attention over the paged cache on tensor cores, in the flash-attention style: for
// chunked prefill and for batches that mix prompt chunks with decode rows.
//
// A block computes kBlockM query rows of one sequence: kHeads query heads of one KV group (which
// read the same keys) times kBlockM / kHeads positions, so each key/value tile gathered into shared
// memory serves every head of the block. Its warps own two m16 row tiles each (one head's
// positions), which share every K and V fragment a warp loads from shared memory. Key/value
// tiles of kBlockN tokens are gathered from their paged blocks into shared memory by cp.async,
// double-buffered with one barrier a tile, so the next tile's copy overlaps this tile's math.
// S = Q K^T and O += P V run as mma.sync m16n8k16 (bf16 in, fp32 accumulate); the softmax is
// online, in the log2 domain, with P kept in registers between the two products, and O rescaled
// only in tiles that raise a row's maximum. Shared tiles are rows of head_dim bf16 whose 16-byte
// chunks are XOR-swizzled by the row, so ldmatrix reads of 8 rows at one column hit 8 bank groups.
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/launch.cuh"
#include "core/backend/cuda/mma.cuh"

namespace pulse::cuda {
namespace {

// A kernel's shape: kWarps warps of kRowTiles m16 row tiles each (two tiles share every K and V
// fragment a warp loads), split among kHeads query heads of a KV group (kHeads divides kWarps),
// key tiles of kBlockN keys. For 128-dim heads the S accumulators of 32
// keys are what fits beside O's in registers (64 keys spill; 8 warps or single row tiles were
// slower on the H200: samples/bench/results/history-logs.md, h200-prefill-attention-shapes.txt).
template <int kHeadDim_, int kWarps_, int kRowTiles_, int kBlockN_, int kHeads_>
struct Shape {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kRowTiles = kRowTiles_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kHeads = kHeads_;
  static_assert(kWarps % kHeads == 0);
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kWarpRows = kRowTiles * 16;
  static constexpr int kBlockM = kWarps * kWarpRows;
  static constexpr int kPositions = kBlockM / kHeads;  // positions of the block's tile
  static constexpr int kSharedBytes = (kBlockM + 4 * kBlockN) * kHeadDim * 2;
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();

// The query tile of this block: its sequence and first row, or seq -1 when there is none. Tiles
// of a sequence are numbered last-first, so the tiles with the most keys start first.
struct QueryTile {
  int32_t seq = -1;
  int32_t first_row = 0;  // in the step's rows
  int32_t rows = 0;       // valid rows (positions), at most kPositions
  int32_t first_position = 0;
};

template <int kPositions>
__device__ QueryTile FindTile(const PagedKvBatch& kv, int32_t tile) {
  QueryTile found;
  for (int32_t s = 0; s < kv.num_seqs; ++s) {
    const int32_t q_len = kv.q_offsets[s + 1] - kv.q_offsets[s];
    const int32_t tiles = (q_len + kPositions - 1) / kPositions;
    if (tile < tiles) {
      const int32_t local = tiles - 1 - tile;
      found.seq = s;
      found.first_row = kv.q_offsets[s] + local * kPositions;
      found.rows = min(kPositions, q_len - local * kPositions);
      found.first_position = kv.kv_lens[s] - q_len + local * kPositions;
      return found;
    }
    tile -= tiles;
  }
  return found;
}

template <typename S>
__global__ void __launch_bounds__(S::kThreads, 1)
    PrefillAttentionKernel(const float* __restrict__ q, int64_t q_stride, int32_t num_heads,
                           PagedKvBatch kv, float scale_log2, bf16* __restrict__ out) {
  WaitForPriorGrids();
  constexpr int kHeadDim = S::kHeadDim;
  constexpr int kBlockN = S::kBlockN;
  constexpr int kBlockM = S::kBlockM;
  constexpr int kThreads = S::kThreads;
  constexpr int kWarpRows = S::kWarpRows;
  constexpr int kRowTiles = S::kRowTiles;
  constexpr int kPositions = S::kPositions;
  constexpr int kWarpsPerHead = S::kWarps / S::kHeads;
  constexpr int kChunks = kHeadDim / 8;     // 16-byte chunks of a row
  constexpr int kDimTiles = kHeadDim / 8;   // n-tiles of O
  constexpr int kDimSteps = kHeadDim / 16;  // k-steps of S = Q K^T
  constexpr int kKeyTiles = kBlockN / 8;    // n-tiles of S
  constexpr int kKeySteps = kBlockN / 16;   // k-steps of O += P V
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared_bytes);
  bf16* k_tiles = q_tile + kBlockM * kHeadDim;       // [2][kBlockN][kHeadDim]
  bf16* v_tiles = k_tiles + 2 * kBlockN * kHeadDim;  // [2][kBlockN][kHeadDim]

  const QueryTile tile = FindTile<kPositions>(kv, blockIdx.x);
  if (tile.seq < 0) return;
  const int32_t first_head = blockIdx.y * S::kHeads;
  const PagedKvLayout& layout = kv.layout;
  const int32_t kv_head = first_head / (num_heads / layout.num_kv_heads);
  // Keys this tile can see: through the position of its last valid row.
  const int32_t keys = tile.first_position + tile.rows;
  const int32_t key_tiles = (keys + kBlockN - 1) / kBlockN;
  const int tid = threadIdx.x;
  const int lane = tid % kWarp;
  const int warp = tid / kWarp;
  // Shared row r is position r % kPositions of head first_head + r / kPositions; a warp's rows
  // are one head's.
  const int32_t warp_position = (warp % kWarpsPerHead) * kWarpRows;  // of the warp's first row

  const bf16* blocks = static_cast<const bf16*>(kv.blocks);
  const int32_t* table = kv.block_tables + int64_t{tile.seq} * kv.max_blocks_per_seq;
  const int64_t head_offset = int64_t{kv_head} * layout.head_elems();
  // A power-of-two block size (the usual case) divides keys by a shift.
  const int block_shift =
      (layout.block_tokens & (layout.block_tokens - 1)) == 0 ? __ffs(layout.block_tokens) - 1 : -1;
  const auto load_kv_tile = [&](int32_t key_tile, int stage) {
    bf16* k_dst = k_tiles + stage * kBlockN * kHeadDim;
    bf16* v_dst = v_tiles + stage * kBlockN * kHeadDim;
#pragma unroll 1
    for (int c = tid; c < kBlockN * kChunks; c += kThreads) {
      const int row = c / kChunks;
      const int chunk = c % kChunks;
      const int32_t key = key_tile * kBlockN + row;
      const bool valid = key < keys;
      const bf16* src = blocks;
      if (valid) {
        const int32_t block = block_shift >= 0 ? key >> block_shift : key / layout.block_tokens;
        const int32_t slot = key - block * layout.block_tokens;
        src = blocks + table[block] * layout.block_elems() + head_offset +
              int64_t{slot} * kHeadDim + chunk * 8;
      }
      const int offset = SwizzledOffset<kHeadDim>(row, chunk);
      CopyAsync16(SharedAddress(k_dst + offset), src, valid);
      CopyAsync16(SharedAddress(v_dst + offset), valid ? src + layout.value_offset() : src, valid);
    }
    CopyAsyncCommit();
  };

  load_kv_tile(0, 0);

  // Q: fp32 rows to bf16, zeros past the valid positions.
  for (int c = tid; c < kBlockM * kChunks; c += kThreads) {
    const int row = c / kChunks;
    const int chunk = c % kChunks;
    const int position = row % kPositions;
    float values[8] = {};
    if (position < tile.rows) {
      const float4* src = reinterpret_cast<const float4*>(
          q + int64_t{tile.first_row + position} * q_stride +
          int64_t{first_head + row / kPositions} * kHeadDim + chunk * 8);
      const float4 a = src[0];
      const float4 b = src[1];
      values[0] = a.x, values[1] = a.y, values[2] = a.z, values[3] = a.w;
      values[4] = b.x, values[5] = b.y, values[6] = b.z, values[7] = b.w;
    }
    *reinterpret_cast<Bf16x8*>(q_tile + SwizzledOffset<kHeadDim>(row, chunk)) = Pack(values);
  }

  float o_acc[kRowTiles][kDimTiles][4];
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o_acc[m][n][i] = 0.0f;
    }
  }
  // Row m * 16 + lane / 4 + r * 8 of this warp's kWarpRows: [m][r].
  float row_max[kRowTiles][2];
  float row_sum[kRowTiles][2];
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[m][r] = kNegInf;
      row_sum[m][r] = 0.0f;
    }
  }
  // The position of this lane's row r of row tile m is first_row_position + m * 16 + r * 8.
  const int32_t first_row_position = tile.first_position + warp_position + lane / 4;
  const int q_row = warp * kWarpRows + (lane % 8) + ((lane / 8) % 2) * 8;  // + m * 16

  for (int32_t key_tile = 0; key_tile < key_tiles; ++key_tile) {
    const int stage = key_tile % 2;
    CopyAsyncWait<0>();
    // This tile (and, the first time, Q) is in shared memory for every warp, and every warp is
    // done with the previous tile: its stage takes the next tile's copy, which overlaps this
    // tile's math. One barrier a tile.
    __syncthreads();
    if (key_tile + 1 < key_tiles) load_kv_tile(key_tile + 1, 1 - stage);
    const bf16* k_tile = k_tiles + stage * kBlockN * kHeadDim;
    const bf16* v_tile = v_tiles + stage * kBlockN * kHeadDim;

    float s[kRowTiles][kKeyTiles][4];
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[m][n][i] = 0.0f;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      uint32_t a[kRowTiles][4];
#pragma unroll
      for (int m = 0; m < kRowTiles; ++m) {
        LoadMatrixX4(a[m], SharedAddress(q_tile + SwizzledOffset<kHeadDim>(q_row + m * 16,
                                                                           ks * 2 + lane / 16)));
      }
#pragma unroll
      for (int pair = 0; pair < kKeyTiles / 2; ++pair) {
        const int row = pair * 16 + (lane % 8) + (lane / 16) * 8;
        uint32_t b[4];
        LoadMatrixX4(
            b, SharedAddress(k_tile + SwizzledOffset<kHeadDim>(row, ks * 2 + (lane / 8) % 2)));
#pragma unroll
        for (int m = 0; m < kRowTiles; ++m) {
          MmaBf16(s[m][2 * pair], a[m], b[0], b[1]);
          MmaBf16(s[m][2 * pair + 1], a[m], b[2], b[3]);
        }
      }
    }

    // Mask (causal and past the keys), and the online softmax of this warp's rows. The scale is
    // positive, so the maxima are taken of the unscaled products and scaled once; each
    // probability is then one fma and one ex2.
    const int32_t first_key = key_tile * kBlockN;
    const bool needs_mask =
        first_key + kBlockN > tile.first_position + warp_position || first_key + kBlockN > keys;
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m) {
      float tile_max[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = i / 2;
          if (needs_mask) {
            const int32_t key = first_key + n * 8 + (lane % 4) * 2 + i % 2;
            if (key > first_row_position + m * 16 + r * 8 || key >= keys) s[m][n][i] = kNegInf;
          }
          tile_max[r] = fmaxf(tile_max[r], s[m][n][i]);
        }
      }
      float rescale[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        // Key 0 is visible to every row, so after the first tile no row's maximum is -inf.
        const float new_max = fmaxf(row_max[m][r], tile_max[r] * scale_log2);
        rescale[r] = FastExp2(row_max[m][r] - new_max);
        row_max[m][r] = new_max;
        row_sum[m][r] *= rescale[r];
      }
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s[m][n][i] = FastExp2(fmaf(s[m][n][i], scale_log2, -row_max[m][i / 2]));
          row_sum[m][i / 2] += s[m][n][i];
        }
      }
      // Once the maxima settle, most tiles leave them unchanged: skip the multiply then.
      if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) o_acc[m][n][i] *= rescale[i / 2];
        }
      }
    }

    // O += P V, P from the S accumulators as A fragments; each V fragment serves both row tiles.
#pragma unroll
    for (int ks = 0; ks < kKeySteps; ++ks) {
      uint32_t p[kRowTiles][4];
#pragma unroll
      for (int m = 0; m < kRowTiles; ++m) {
        p[m][0] = PackBf16(s[m][2 * ks][0], s[m][2 * ks][1]);
        p[m][1] = PackBf16(s[m][2 * ks][2], s[m][2 * ks][3]);
        p[m][2] = PackBf16(s[m][2 * ks + 1][0], s[m][2 * ks + 1][1]);
        p[m][3] = PackBf16(s[m][2 * ks + 1][2], s[m][2 * ks + 1][3]);
      }
      const int row = ks * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int pair = 0; pair < kDimTiles / 2; ++pair) {
        uint32_t b[4];
        LoadMatrixX4Trans(
            b, SharedAddress(v_tile + SwizzledOffset<kHeadDim>(row, pair * 2 + lane / 16)));
#pragma unroll
        for (int m = 0; m < kRowTiles; ++m) {
          MmaBf16(o_acc[m][2 * pair], p[m], b[0], b[1]);
          MmaBf16(o_acc[m][2 * pair + 1], p[m], b[2], b[3]);
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < kRowTiles; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[m][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int position = warp_position + m * 16 + lane / 4 + r * 8;
      if (position >= tile.rows) continue;
      const float inv_sum = 1.0f / sum;
      const int32_t head = first_head + warp / kWarpsPerHead;
      bf16* dst = out + (int64_t{tile.first_row + position} * num_heads + head) * kHeadDim;
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        *reinterpret_cast<__nv_bfloat162*>(dst + n * 8 + (lane % 4) * 2) =
            __floats2bfloat162_rn(o_acc[m][n][2 * r] * inv_sum, o_acc[m][n][2 * r + 1] * inv_sum);
      }
    }
  }
}

template <typename S>
cudaError_t Launch(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvBatch& kv,
                   float scale, bf16* out, cudaStream_t stream) {
  static const cudaError_t configured = cudaFuncSetAttribute(
      PrefillAttentionKernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSharedBytes);
  if (configured != cudaSuccess) return configured;
  // An upper bound of the query tiles; blocks past the last tile return at once.
  const int64_t tiles = (int64_t{kv.num_rows} + S::kPositions - 1) / S::kPositions + kv.num_seqs;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(num_heads / S::kHeads));
  return LaunchKernel(PrefillAttentionKernel<S>, grid, S::kThreads, S::kSharedBytes, stream, q,
                      q_stride, num_heads, kv, scale * kLog2e, out);
}

// The block shape for a head size and the heads of a KV group that can share its K/V tiles.
template <int kHeadDim, int kWarps, int kRowTiles, int kBlockN>
cudaError_t LaunchForGroup(const float* q, int64_t q_stride, int32_t num_heads,
                           const PagedKvBatch& kv, float scale, bf16* out, cudaStream_t stream) {
  const int32_t group = num_heads / kv.layout.num_kv_heads;
  if (group % 4 == 0) {
    return Launch<Shape<kHeadDim, kWarps, kRowTiles, kBlockN, 4>>(q, q_stride, num_heads, kv, scale,
                                                                  out, stream);
  }
  if (group % 2 == 0) {
    return Launch<Shape<kHeadDim, kWarps, kRowTiles, kBlockN, 2>>(q, q_stride, num_heads, kv, scale,
                                                                  out, stream);
  }
  return Launch<Shape<kHeadDim, kWarps, kRowTiles, kBlockN, 1>>(q, q_stride, num_heads, kv, scale,
                                                                out, stream);
}

}  // namespace

cudaError_t LaunchPrefillAttention(const float* q, int64_t q_stride, int32_t num_heads,
                                   const PagedKvBatch& kv, float scale, void* out,
                                   cudaStream_t stream) {
  if (kv.num_rows == 0) return cudaSuccess;
  bf16* output = static_cast<bf16*>(out);
  switch (kv.layout.head_dim) {
    case 64:
      return LaunchForGroup<64, 4, 2, 64>(q, q_stride, num_heads, kv, scale, output, stream);
    case 128:
      return LaunchForGroup<128, 4, 2, 32>(q, q_stride, num_heads, kv, scale, output, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace pulse::cuda
