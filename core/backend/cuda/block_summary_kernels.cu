// Quest block summaries for sparse decode attention: SummarizeBlocks (per KV head and box, the
// channel minimum and maximum of a block's bf16 keys, stored at the estimator's precision) and
// ScoreBlocks (every query head's bound of q.k over a candidate block's summary). The CPU
// reference is core/backend/reference/block_summary.cc.
//
// Both are memory bound; their floors at the H200's HBM bandwidth (4.8 TB/s nominal, ~4 TB/s
// measured), for Llama-3.1-8B (8 KV heads, 32 query heads, head_dim 128, 32-token blocks) and
// Quest's box in fp32 (SummaryBytes: 8 KiB a block; 4 KiB at radius 0, half that in bf16):
//  - SummarizeBlocks reads each block's keys once and writes its summary:
//    num_kv_heads * block_tokens * head_dim * 2 bytes of keys a block, here 64 KiB + 8 KiB =
//    72 KiB, 18 ns a block at 4 TB/s; 512 blocks (a prompt chunk of 16K tokens) 37.7 MB, 9.4 us a
//    layer. A decode step fills a few blocks a layer: launch latency then.
//  - ScoreBlocks reads each candidate's summary once and writes its num_heads bounds (128 B); the
//    q rows (16 KiB each) are few and stay in cache. 8 rows x 512 candidates: 33.6 MB of
//    summaries + 0.5 MB of bounds + 0.1 MB of q, 8.6 us a layer at 4 TB/s (7.1 us at 4.8 TB/s),
//    0.27 ms a step over 32 layers; the summaries' share scales with their bytes.
// Compute is well below either: a key row costs two fminf/fmaxf a channel; a bound costs a
// select and an FMA a channel, and one summary serves its group's query heads from registers.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/backend/cuda/block_summary_kernels.h"
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/launch.cuh"
#include "core/backend/cuda/mma.cuh"
#include "core/backend/summary_int.h"
#include "core/backend/summary_radius.h"

namespace pulse::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;

__device__ __forceinline__ float NaN() { return __int_as_float(0x7fc00000); }

bool Aligned(const void* pointer, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

bool Positive(const PagedKvLayout& layout) {
  return layout.block_tokens > 0 && layout.num_kv_heads > 0 && layout.head_dim > 0;
}

// The kernels are templates on the stored value type: float, bf16, int8_t or Int4x2, a byte of
// two int4 values (SummaryBytes).
struct Int4x2 {
  uint8_t bits;
};
template <typename Value>
constexpr bool kIsInt4 = std::is_same_v<Value, Int4x2>;
// Integer rows keep a scale each, after the summary's rows.
template <typename Value>
constexpr bool kScaled = std::is_same_v<Value, int8_t> || kIsInt4<Value>;
template <typename Value>
constexpr int kLevels = kIsInt4<Value> ? kInt4Levels : kInt8Levels;
// Values of a row that one Value holds.
template <typename Value>
constexpr int32_t kPacked = kIsInt4<Value> ? 2 : 1;

// The first Value of row `row` of a summary of rows of `head_dim` values.
template <typename Value, typename Byte>
__device__ __forceinline__ auto RowAt(Byte* summary, int32_t row, int32_t head_dim) {
  using Stored = std::conditional_t<std::is_const_v<Byte>, const Value, Value>;
  return reinterpret_cast<Stored*>(summary) + int64_t{row} * (head_dim / kPacked<Value>);
}

// The byte offset of the scale of row `row` of a summary of `rows` integer rows of `head_dim`.
template <typename Value>
__device__ __forceinline__ int64_t ScaleOffset(int32_t rows, int32_t head_dim, int32_t row) {
  const int64_t row_bytes = head_dim / kPacked<Value>;
  return rows * row_bytes + int64_t{row} * static_cast<int64_t>(sizeof(float));
}

// --- SummarizeBlocks ---------------------------------------------------------------------------
// A warp summarizes one (block, KV head, box): its keys are one contiguous run of the head's
// [block_tokens][head_dim] bf16 keys, read once, coalesced, as vectors of kWidth channels (8:
// 16-byte loads; 1: any head_dim or alignment; 2 at int4, whose lanes then store a byte each).
// The warp covers up to 32 vectors of a key row a
// pass: `width` lanes across the row, 32 / width rows at once (head_dim 128: 16 lanes x 2 rows,
// 512 contiguous bytes a load), kRowUnroll rows a lane in flight; then the rows' lanes merge by
// shuffles and the first `width` lanes store the box's rows at the precision.
constexpr int kRowUnroll = 8;

__device__ __forceinline__ void LoadKeys(const bf16* keys, float (&out)[8]) {
  Unpack(*reinterpret_cast<const Bf16x8*>(keys), out);
}
template <int kWidth>
__device__ __forceinline__ void LoadKeys(const bf16* keys, float (&out)[kWidth]) {
#pragma unroll
  for (int k = 0; k < kWidth; ++k) out[k] = __bfloat162float(keys[k]);
}

// Vectors `first + lane` (lane < min(32, vectors - first)) of the box's channel minimum and
// maximum, shrunk to `radius`, into lo and hi (the other lanes' values are not used).
template <int kWidth>
__device__ __forceinline__ void SummarizePass(const bf16* keys, int32_t dim, int32_t tokens,
                                              int32_t first, float radius, float (&lo)[kWidth],
                                              float (&hi)[kWidth]) {
  const int lane = threadIdx.x % kWarp;
  const int32_t width = min(kWarp, dim / kWidth - first);  // vectors of a row this pass
  const int32_t rows = kWarp / width;                      // rows at once
  const int32_t column = lane % width;
  const int32_t row = lane / width;
  // NaN is the identity of fminf and fmaxf: a channel whose keys are all NaN stays NaN.
#pragma unroll
  for (int k = 0; k < kWidth; ++k) lo[k] = hi[k] = NaN();
  if (row < rows) {
    const bf16* column_keys = keys + (first + column) * kWidth;
    for (int32_t t = row; t < tokens; t += kRowUnroll * rows) {
      float values[kRowUnroll][kWidth];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int32_t token = t + u * rows;
        if (token < tokens) {
          LoadKeys(column_keys + int64_t{token} * dim, values[u]);
        } else {
#pragma unroll
          for (int k = 0; k < kWidth; ++k) values[u][k] = NaN();
        }
      }
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
#pragma unroll
        for (int k = 0; k < kWidth; ++k) {
          lo[k] = fminf(lo[k], values[u][k]);
          hi[k] = fmaxf(hi[k], values[u][k]);
        }
      }
    }
  }
  // Lane `column` (< width) gathers the rows' lanes column + r * width, from copies taken
  // before any lane merged (a merged lane could hold another column's values when width does
  // not divide 32).
  float own_lo[kWidth];
  float own_hi[kWidth];
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    own_lo[k] = lo[k];
    own_hi[k] = hi[k];
  }
  for (int32_t r = 1; r < rows; ++r) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      lo[k] = fminf(lo[k], __shfl_sync(0xffffffffu, own_lo[k], lane + r * width));
      hi[k] = fmaxf(hi[k], __shfl_sync(0xffffffffu, own_hi[k], lane + r * width));
    }
  }
  if (radius != 1.0f) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) ShrinkToRadius(lo[k], hi[k], radius);
  }
}

// Stores kWidth values of a row at `out` (`scale`: an integer row's; unused otherwise).
__device__ __forceinline__ void StoreValues(float* out, const float (&values)[8], float) {
  reinterpret_cast<float4*>(out)[0] = make_float4(values[0], values[1], values[2], values[3]);
  reinterpret_cast<float4*>(out)[1] = make_float4(values[4], values[5], values[6], values[7]);
}
__device__ __forceinline__ void StoreValues(float* out, const float (&values)[1], float) {
  out[0] = values[0];
}
__device__ __forceinline__ void StoreValues(bf16* out, const float (&values)[8], float) {
  *reinterpret_cast<Bf16x8*>(out) = Pack(values);
}
__device__ __forceinline__ void StoreValues(bf16* out, const float (&values)[1], float) {
  out[0] = __float2bfloat16_rn(values[0]);
}
template <int kWidth>
__device__ __forceinline__ void StoreValues(int8_t* out, const float (&values)[kWidth],
                                            float scale) {
#pragma unroll
  for (int k = 0; k < kWidth; ++k) out[k] = QuantizeInt<kInt8Levels>(values[k], scale);
}
template <int kWidth>
__device__ __forceinline__ void StoreValues(Int4x2* out, const float (&values)[kWidth],
                                            float scale) {
#pragma unroll
  for (int k = 0; k < kWidth / 2; ++k) {
    out[k].bits = PackInt4(QuantizeInt<kInt4Levels>(values[2 * k], scale),
                           QuantizeInt<kInt4Levels>(values[2 * k + 1], scale));
  }
}

// Folds this lane's kWidth values of a row into the row's largest magnitude and finiteness.
template <int kWidth>
__device__ __forceinline__ void Measure(const float (&values)[kWidth], float& largest,
                                        bool& finite) {
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    largest = fmaxf(largest, fabsf(values[k]));
    finite = finite && isfinite(values[k]);
  }
}

template <int kWidth, typename Value>
__global__ void __launch_bounds__(kThreads)
    SummarizeBlocksKernel(const bf16* __restrict__ blocks, PagedKvLayout layout, int32_t boxes,
                          const int32_t* __restrict__ block_ids,
                          const int32_t* __restrict__ summary_ids, int64_t tasks, float radius,
                          int64_t summary_bytes, std::byte* __restrict__ summaries) {
  WaitForPriorGrids();
  const int64_t task = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  if (task >= tasks) return;  // the whole warp
  const int lane = threadIdx.x % kWarp;
  const int32_t boxes_a_block = layout.num_kv_heads * boxes;
  const int32_t i = static_cast<int32_t>(task / boxes_a_block);
  if (block_ids[i] < 0) return;                                         // padding: the whole warp
  const int32_t head_box = static_cast<int32_t>(task % boxes_a_block);  // head * boxes + box
  const int32_t head = head_box / boxes;
  const int32_t dim = layout.head_dim;
  const int32_t tokens = layout.block_tokens / boxes;
  const bf16* keys = blocks + block_ids[i] * layout.block_elems() + head * layout.head_elems() +
                     int64_t{head_box % boxes} * tokens * dim;
  // At radius 0 the box keeps its center alone: lo after the shrink (hi equals it).
  const int32_t box_rows = radius == 0.0f ? 1 : 2;
  const int32_t row = head_box * box_rows;
  std::byte* summary = summaries + summary_ids[i] * summary_bytes;
  Value* lo_row = RowAt<Value>(summary, row, dim);
  Value* hi_row = RowAt<Value>(summary, row + 1, dim);
  const int32_t vectors = dim / kWidth;
  float lo[kWidth];
  float hi[kWidth];
  float lo_scale = 0.0f;
  float hi_scale = 0.0f;
  if constexpr (kScaled<Value>) {
    // A row's scale needs the row's largest magnitude before any value is stored: a row of one
    // pass keeps its values in registers for the store, a wider row is summarized again.
    float lo_largest = 0.0f;
    float hi_largest = 0.0f;
    bool lo_finite = true;
    bool hi_finite = true;
    for (int32_t first = 0; first < vectors; first += kWarp) {
      SummarizePass(keys, dim, tokens, first, radius, lo, hi);
      if (lane < vectors - first) {
        Measure(lo, lo_largest, lo_finite);
        Measure(hi, hi_largest, hi_finite);
      }
    }
    lo_scale = IntRowScale<kLevels<Value>>(WarpReduce(lo_largest, MaxFloat{}),
                                           __all_sync(0xffffffffu, lo_finite));
    hi_scale = IntRowScale<kLevels<Value>>(WarpReduce(hi_largest, MaxFloat{}),
                                           __all_sync(0xffffffffu, hi_finite));
    if (lane == 0) {
      const int32_t rows = boxes_a_block * box_rows;
      memcpy(summary + ScaleOffset<Value>(rows, dim, row), &lo_scale, sizeof(float));
      if (box_rows == 2) {
        memcpy(summary + ScaleOffset<Value>(rows, dim, row + 1), &hi_scale, sizeof(float));
      }
    }
  }
  for (int32_t first = 0; first < vectors; first += kWarp) {
    if (!kScaled<Value> || vectors > kWarp) SummarizePass(keys, dim, tokens, first, radius, lo, hi);
    if (lane < vectors - first) {
      const int32_t at = (first + lane) * (kWidth / kPacked<Value>);
      StoreValues(lo_row + at, lo, lo_scale);
      if (box_rows == 2) StoreValues(hi_row + at, hi, hi_scale);
    }
  }
}

template <typename Value>
cudaError_t LaunchSummarize(bool vectors, unsigned grid, cudaStream_t stream, const bf16* keys,
                            const PagedKvLayout& layout, const BlockEstimator& estimator,
                            const int32_t* block_ids, const int32_t* summary_ids, int64_t tasks,
                            std::byte* summaries) {
  const int64_t bytes = SummaryBytes(layout, estimator);
  // Without vectors a lane takes one channel, or at int4 the two of a byte.
  constexpr int kScalarWidth = kPacked<Value>;
  return vectors ? LaunchKernel(SummarizeBlocksKernel<8, Value>, grid, kThreads, 0, stream, keys,
                                layout, estimator.boxes, block_ids, summary_ids, tasks,
                                estimator.radius, bytes, summaries)
                 : LaunchKernel(SummarizeBlocksKernel<kScalarWidth, Value>, grid, kThreads, 0,
                                stream, keys, layout, estimator.boxes, block_ids, summary_ids,
                                tasks, estimator.radius, bytes, summaries);
}

// --- ScoreBlocks -------------------------------------------------------------------------------
// A thread block scores a tile of kScoreTile consecutive candidates for one KV head (grid y):
// kScoreLanes lanes a candidate, so a warp serves kCandidatesPerWarp candidates. Each candidate's
// lanes load each box's rows of the KV head once (coalesced quads of 4 values: 16, 8, 4 or 2
// bytes at fp32, bf16, int8 or int4), keep them in registers in fp32 and score the group's query
// heads against them, reading q (a few rows, cached) as float4s; the candidate's partial sums meet
// by shuffles. The tile's bounds go through shared memory so that each query head's kScoreTile
// bounds are written as one contiguous run.
constexpr int kScoreLanes = 8;
constexpr int kCandidatesPerWarp = kWarp / kScoreLanes;
constexpr int kScoreTile = kWarpsPerBlock * kCandidatesPerWarp;
// The largest group the tiled kernel stages in its 48 KiB of shared memory.
constexpr int32_t kMaxTiledGroup = (48 << 10) / (kScoreTile * static_cast<int>(sizeof(float)));

// How a block's estimate merges its boxes' bounds (BoxCombine, as the reference's CombineBoxes):
// the larger, or the log of the sum of exps at `scale`; a NaN counts for nothing.
struct BoxCombiner {
  bool log_sum_exp = false;
  float scale = 1.0f;  // LogSumExpScale(head_dim)

  static BoxCombiner Of(const BlockEstimator& estimator, int32_t head_dim) {
    return {.log_sum_exp = estimator.combine == BoxCombine::kLogSumExp,
            .scale = LogSumExpScale(head_dim)};
  }
  __device__ __forceinline__ float Merge(float a, float b) const {
    if (!log_sum_exp) return fmaxf(a, b);
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    const float top = fmaxf(a, b);
    if (!isfinite(top)) return top;
    return top + log1pf(expf(-scale * fabsf(a - b))) / scale;
  }
};

// acc + max(q * lo, q * hi), in one rounding: q's sign picks the larger product (q * lo when
// lo == hi, a box center). Rows quantized with scales of their own can store lo above hi, so the
// order is taken from the values. A NaN q gives NaN.
__device__ __forceinline__ float AddBound(float q, float lo, float hi, float acc) {
  const bool inverted = hi < lo;
  return fmaf(q, (q >= 0.0f) != inverted ? hi : lo, acc);
}

// Value d of a stored row, in fp32 (`scale`: an integer row's; unused otherwise).
__device__ __forceinline__ float Read(const float* row, int32_t d, float) { return row[d]; }
__device__ __forceinline__ float Read(const bf16* row, int32_t d, float) {
  return __bfloat162float(row[d]);
}
__device__ __forceinline__ float Read(const int8_t* row, int32_t d, float scale) {
  return DequantizeInt(row[d], scale);
}
__device__ __forceinline__ float Read(const Int4x2* row, int32_t d, float scale) {
  const uint8_t packed = row[d / 2].bits;
  return DequantizeInt(d % 2 == 0 ? LowInt4(packed) : HighInt4(packed), scale);
}

// Values 4 * quad .. 4 * quad + 3 of a stored row, whose quads are aligned, in fp32.
struct alignas(8) Bf16x4 {
  __nv_bfloat162 pairs[2];
};
__device__ __forceinline__ float4 ReadQuad(const float* row, int32_t quad, float) {
  return reinterpret_cast<const float4*>(row)[quad];
}
__device__ __forceinline__ float4 ReadQuad(const bf16* row, int32_t quad, float) {
  const Bf16x4 packed = reinterpret_cast<const Bf16x4*>(row)[quad];
  const float2 low = __bfloat1622float2(packed.pairs[0]);
  const float2 high = __bfloat1622float2(packed.pairs[1]);
  return make_float4(low.x, low.y, high.x, high.y);
}
__device__ __forceinline__ float4 ReadQuad(const int8_t* row, int32_t quad, float scale) {
  const char4 packed = reinterpret_cast<const char4*>(row)[quad];
  return make_float4(DequantizeInt(packed.x, scale), DequantizeInt(packed.y, scale),
                     DequantizeInt(packed.z, scale), DequantizeInt(packed.w, scale));
}
__device__ __forceinline__ float4 ReadQuad(const Int4x2* row, int32_t quad, float scale) {
  const uchar2 packed = reinterpret_cast<const uchar2*>(row)[quad];
  return make_float4(
      DequantizeInt(LowInt4(packed.x), scale), DequantizeInt(HighInt4(packed.x), scale),
      DequantizeInt(LowInt4(packed.y), scale), DequantizeInt(HighInt4(packed.y), scale));
}

// kVectors: quads of a row each lane holds, at least head_dim / (4 * kScoreLanes); kBoxRows:
// rows a box (1: its center, 2: its minimum and maximum).
template <int kVectors, typename Value, int kBoxRows>
__global__ void __launch_bounds__(kThreads)
    ScoreBlocksKernel(const float* __restrict__ q, int64_t q_stride, int32_t group,
                      int32_t num_kv_heads, int32_t head_dim, int32_t boxes,
                      const std::byte* __restrict__ summaries, int64_t summary_bytes,
                      const int32_t* __restrict__ summary_ids,
                      const int32_t* __restrict__ query_rows, int32_t count, BoxCombiner combine,
                      float* __restrict__ bounds) {
  WaitForPriorGrids();
  extern __shared__ float tile_bounds[];  // [group][kScoreTile]
  const int32_t kv_head = blockIdx.y;
  const int lane = threadIdx.x % kWarp;
  const int part = lane % kScoreLanes;
  const int slot = threadIdx.x / kWarp * kCandidatesPerWarp + lane / kScoreLanes;
  const int64_t tile = int64_t{blockIdx.x} * kScoreTile;
  const int64_t i = tile + slot;
  const bool active = i < count;  // every lane stays for the shuffles and the barrier
  const int32_t vectors = head_dim / (4 * kScoreLanes);

  const float4* q_heads = nullptr;
  const std::byte* summary = nullptr;
  if (active) {
    q_heads = reinterpret_cast<const float4*>(q + query_rows[i] * q_stride +
                                              int64_t{kv_head} * group * head_dim);
    summary = summaries + summary_ids[i] * summary_bytes;
  }
  // A head's estimate merges its boxes' bounds (NaN only when all are).
  for (int32_t box = 0; box < boxes; ++box) {
    float4 values[kBoxRows][kVectors];  // the box's rows (lo, then hi) of this lane's channels
    if (active) {
      const int32_t first_row = (kv_head * boxes + box) * kBoxRows;
#pragma unroll
      for (int r = 0; r < kBoxRows; ++r) {
        const Value* row = RowAt<Value>(summary, first_row + r, head_dim);
        float scale = 0.0f;
        if constexpr (kScaled<Value>) {
          const int32_t rows = num_kv_heads * boxes * kBoxRows;
          scale = *reinterpret_cast<const float*>(
              summary + ScaleOffset<Value>(rows, head_dim, first_row + r));
        }
#pragma unroll
        for (int u = 0; u < kVectors; ++u) {
          if (u < vectors) values[r][u] = ReadQuad(row, part + u * kScoreLanes, scale);
        }
      }
    }
    for (int32_t h = 0; h < group; ++h) {
      float acc = 0.0f;
      if (active) {
        const float4* q_head = q_heads + int64_t{h} * (head_dim / 4);
#pragma unroll
        for (int u = 0; u < kVectors; ++u) {
          if (u < vectors) {
            const float4 x = q_head[part + u * kScoreLanes];
            const float4& lo = values[0][u];
            const float4& hi = values[kBoxRows - 1][u];
            acc = AddBound(x.x, lo.x, hi.x, acc);
            acc = AddBound(x.y, lo.y, hi.y, acc);
            acc = AddBound(x.z, lo.z, hi.z, acc);
            acc = AddBound(x.w, lo.w, hi.w, acc);
          }
        }
      }
#pragma unroll
      for (int offset = kScoreLanes / 2; offset > 0; offset /= 2) {
        acc += __shfl_xor_sync(0xffffffffu, acc, offset);
      }
      float& bound = tile_bounds[h * kScoreTile + slot];
      if (part == 0) bound = box == 0 ? acc : combine.Merge(bound, acc);
    }
  }
  __syncthreads();
  for (int32_t e = threadIdx.x; e < group * kScoreTile; e += kThreads) {
    const int32_t h = e / kScoreTile;
    const int32_t c = e % kScoreTile;
    if (tile + c < count) {
      bounds[(int64_t{kv_head} * group + h) * count + tile + c] = tile_bounds[e];
    }
  }
}

// int4 rows at radius 0 (a box is one stored row; the default estimator keeps one a token): a
// bound is a row's dot product with a query head, times the row's scale, the largest over the
// candidate's boxes. On tensor cores (mma m16n8k16, bf16 in, fp32 accumulated): a warp takes a
// run of kRunCandidates consecutive candidates of one KV head and multiplies 16 rows at a time
// (two groups of 8 boxes; with 4 boxes a candidate, as 4-token blocks have, a group is two
// candidates' rows, kPaired) by its group's query heads. The int4 values are exact in bf16; each
// query channel is split into three bf16 terms, hi + mid + lo (exact to fp32's 24 bits), which
// fill the 8 columns: column h holds head h's hi and, through a second product, its lo; column
// h + 4 its mid; the two are added after. Lane t of a row group loads its rows' channels
// [t, t + 1) * kHeadDim / 4 as words of 8 (one 8-byte load holds two); as a dot product may sum
// its channels in any order, the fragments' k index is the same permutation of the channels in A
// and in B: word m's nibbles j and j + 4 form the pair of k-step 2m + j / 2, at k (2t, 2t + 1) for
// even j and (2t + 8, 2t + 9) for odd j. The scale, the boxes' fmaxf and NaN follow the other
// kernels. A tile's rows may belong to candidates of other query rows: it is multiplied once for
// each query row its candidates name, each row keeping the product with its own. Each lane keeps
// the bounds of one candidate of the run, written per query head as one contiguous run. Four blocks
// an SM (64 registers) keep enough tiles' loads in flight; loading the next tile ahead in registers
// cost more registers than it hid (results README).
constexpr int kRunCandidates = kWarp;

// The bf16 pair (n_j, n_{j+4}) of nibbles j and j + 4 of `word` (int4, two's complement), exactly:
// with the sign bit flipped a nibble is n + 8, and 0x4300 | (n + 8) is the bf16 136 + n.
__device__ __forceinline__ uint32_t Int4PairBf16(uint32_t word, int j) {
  const uint32_t biased = ((word >> (4 * j)) & 0x000F000Fu) ^ 0x43084308u;
  const __nv_bfloat162 value =
      __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased), __float2bfloat162_rn(136.0f));
  return *reinterpret_cast<const uint32_t*>(&value);
}

template <int kHeadDim>
struct TokensTile {
  static constexpr int kWords = kHeadDim / 32;  // 8-channel words a lane holds of a row
  uint32_t rows[2][kWords];                     // the lane's channels of its two rows
  float scales[2];
};

// Warps a block: a warp keeps its query's B fragments in shared memory, 16 bytes a lane and k-step.
__host__ __device__ constexpr int TokensWarps(int head_dim) { return head_dim <= 128 ? 8 : 4; }

template <int kGroup, int kHeadDim, bool kPaired>
__global__ void __launch_bounds__(TokensWarps(kHeadDim) * kWarp, kHeadDim <= 128 ? 4 : 1)
    ScoreTokensInt4Kernel(const float* __restrict__ q, int64_t q_stride, int32_t num_kv_heads,
                          int32_t boxes, const std::byte* __restrict__ summaries,
                          int64_t summary_bytes, const int32_t* __restrict__ summary_ids,
                          const int32_t* __restrict__ query_rows, int32_t count,
                          BoxCombiner combine, float* __restrict__ bounds) {
  WaitForPriorGrids();
  static_assert(kGroup >= 1 && kGroup <= 4);
  constexpr int kRowBytes = kHeadDim / 2;
  constexpr int kWords = TokensTile<kHeadDim>::kWords;
  constexpr int kSteps = kHeadDim / 16;
  constexpr int kWarps = TokensWarps(kHeadDim);
  // B of k-step s for lane l: {hi or mid: k 2t and 2t + 1, k 2t + 8 and 2t + 9; lo or 0: alike}.
  __shared__ uint4 b_fragments[kWarps][kSteps][kWarp];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int row_in_group = lane / 4;  // the fragments' g
  const int part = lane % 4;          // the fragments' t
  const int32_t kv_head = blockIdx.y;
  const int64_t first = (int64_t{blockIdx.x} * kWarps + warp) * kRunCandidates;
  if (first >= count) return;
  const int32_t run =
      static_cast<int32_t>(count - first < kRunCandidates ? count - first : kRunCandidates);
  const int32_t rows = num_kv_heads * boxes;
  // Unpaired, a candidate's boxes fill groups_per_candidate groups; paired, a group holds the
  // rows of candidates 2g (its rows 0-3) and 2g + 1 (rows 4-7).
  const int32_t groups_per_candidate = kPaired ? 1 : boxes / 8;
  const int32_t groups = kPaired ? (run + 1) / 2 : run * groups_per_candidate;
  const int32_t tiles = (groups + 1) / 2;
  const int32_t my_id = lane < run ? summary_ids[first + lane] : 0;
  const int32_t my_query_row = lane < run ? query_rows[first + lane] : 0;

  // The candidate of this lane's row in group `group`.
  const auto candidate_of = [&](int32_t group) {
    return kPaired ? 2 * group + row_in_group / 4 : group / groups_per_candidate;
  };
  const auto load = [&](int32_t tile, TokensTile<kHeadDim>& out) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int32_t group = 2 * tile + half;
      const int32_t candidate = candidate_of(group);
      const int32_t id = __shfl_sync(0xffffffffu, my_id, candidate < run ? candidate : 0);
      if (candidate >= run) {
#pragma unroll
        for (int w = 0; w < kWords; ++w) out.rows[half][w] = 0;
        out.scales[half] = 0.0f;
        continue;
      }
      const int32_t row =
          kv_head * boxes +
          (kPaired ? row_in_group % 4 : (group % groups_per_candidate) * 8 + row_in_group);
      const std::byte* summary = summaries + id * summary_bytes;
      const auto* words =
          reinterpret_cast<const uint2*>(summary + int64_t{row} * kRowBytes + part * kWords * 4);
#pragma unroll
      for (int w = 0; w < kWords / 2; ++w) {
        const uint2 pair = words[w];
        out.rows[half][2 * w] = pair.x;
        out.rows[half][2 * w + 1] = pair.y;
      }
      out.scales[half] =
          *reinterpret_cast<const float*>(summary + int64_t{rows} * kRowBytes + row * 4);
    }
  };

  // The query row's B fragments, column g: head g % 4's hi and lo terms for g < 4, its mid for
  // g >= 4 (zero past the group).
  int32_t loaded_row = -1;
  const auto load_query = [&](int32_t query_row) {
    loaded_row = query_row;
    const int head = row_in_group % 4;
    const bool high_columns = row_in_group >= 4;
    const float* head_q = q + query_row * q_stride +
                          (int64_t{kv_head} * kGroup + (head < kGroup ? head : 0)) * kHeadDim +
                          part * kWords * 8;
    __syncwarp();  // every lane is done with the fragments of the query before
#pragma unroll 1
    for (int m = 0; m < kWords; ++m) {
      float first_terms[8];
      float second_terms[8];
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const float4 x = head < kGroup ? reinterpret_cast<const float4*>(head_q + 8 * m)[v]
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const float channels[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float hi = __bfloat162float(__float2bfloat16_rn(channels[c]));
          const float rest = channels[c] - hi;
          const float mid = __bfloat162float(__float2bfloat16_rn(rest));
          first_terms[4 * v + c] = high_columns ? mid : hi;
          second_terms[4 * v + c] = high_columns ? 0.0f : rest - mid;
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // k-step 2m + half: nibbles 2 half and 2 half + 1
        const int j = 2 * half;
        b_fragments[warp][2 * m + half][lane] =
            make_uint4(PackBf16(first_terms[j], first_terms[j + 4]),
                       PackBf16(first_terms[j + 1], first_terms[j + 5]),
                       PackBf16(second_terms[j], second_terms[j + 4]),
                       PackBf16(second_terms[j + 1], second_terms[j + 5]));
      }
    }
    __syncwarp();
  };
  // The tile's 16 rows against the loaded query: c[0], c[1] row g's columns 2t, 2t + 1; c[2],
  // c[3] row g + 8's.
  const auto multiply = [&](const TokensTile<kHeadDim>& tile, float(&c)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int m = s / 2;
      const int j = 2 * (s % 2);
      const uint32_t a[4] = {Int4PairBf16(tile.rows[0][m], j), Int4PairBf16(tile.rows[1][m], j),
                             Int4PairBf16(tile.rows[0][m], j + 1),
                             Int4PairBf16(tile.rows[1][m], j + 1)};
      const uint4 b = b_fragments[warp][s][lane];
      MmaBf16(c, a, b.x, b.y);
      MmaBf16(c, a, b.z, b.w);
    }
  };

  float kept[kGroup];  // the bounds of candidate first + lane
#pragma unroll
  for (int h = 0; h < kGroup; ++h) kept[h] = NaN();
  // A tile holds kCandidates candidates (rows of row group k, or, paired, of half k % 2 of row
  // group k / 2), kRowLanes lanes the rows of each. Their query rows are shuffled from the lanes
  // that read them, never kept in an array indexed at run time (local memory).
  constexpr int kCandidates = kPaired ? 4 : 2;
  constexpr int kRowLanes = kPaired ? kWarp / 2 : kWarp;
  const auto tile_candidate = [&](int32_t tile_index, int k) {
    return kPaired ? kCandidates * tile_index + k : (2 * tile_index + k) / groups_per_candidate;
  };
  // Past the run: the last candidate's, so that no product is taken for it.
  const auto query_of = [&](int32_t candidate) {
    return __shfl_sync(0xffffffffu, my_query_row, min(candidate, run - 1));
  };
  const auto reduce = [&](int32_t tile_index, const TokensTile<kHeadDim>& tile) {
    const int32_t asked[2] = {query_of(candidate_of(2 * tile_index)),
                              query_of(candidate_of(2 * tile_index + 1))};  // this lane's rows'
    int32_t previous = query_of(tile_candidate(tile_index, 0));
    if (previous != loaded_row) load_query(previous);
    float c[4];
    multiply(tile, c);
    // Another query row (uniform): its product replaces this lane's rows that ask it.
#pragma unroll 1
    for (int k = 1; k < kCandidates; ++k) {
      const int32_t query = query_of(tile_candidate(tile_index, k));
      if (query == previous) continue;
      previous = query;
      load_query(query);
      float other[4];
      multiply(tile, other);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (asked[half] == query) {
          c[2 * half] = other[2 * half];
          c[2 * half + 1] = other[2 * half + 1];
        }
      }
    }
    // Column h plus column h + 4, times the row's scale, a slot's rows merged: their largest,
    // then (log-sum-exp) the shares of the others against it.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      c[i] = (c[i] + __shfl_xor_sync(0xffffffffu, c[i], 2)) * tile.scales[i / 2];
      float top = c[i];
#pragma unroll
      for (int offset = 4; offset < kRowLanes; offset *= 2) {
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
      }
      if (combine.log_sum_exp) {
        float share = isnan(c[i]) ? 0.0f : c[i] == top ? 1.0f : expf(combine.scale * (c[i] - top));
#pragma unroll
        for (int offset = 4; offset < kRowLanes; offset *= 2) {
          share += __shfl_xor_sync(0xffffffffu, share, offset);
        }
        if (isfinite(top)) top += logf(share) / combine.scale;
      }
      c[i] = top;
    }
    // Lane t < 2 of a slot's lanes holds heads 2t and 2t + 1: row group 0 in c[0], c[1], row
    // group 1 in c[2], c[3].
#pragma unroll
    for (int k = 0; k < kCandidates; ++k) {
      const int half = kPaired ? k / 2 : k;
      const int first_lane = kPaired ? (k % 2) * kRowLanes : 0;
      const int32_t candidate = tile_candidate(tile_index, k);
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float bound = __shfl_sync(0xffffffffu, c[2 * half + h % 2], first_lane + h / 2);
        if (lane == candidate && candidate < run) kept[h] = combine.Merge(kept[h], bound);
      }
    }
  };

  for (int32_t tile = 0; tile < tiles; ++tile) {
    TokensTile<kHeadDim> rows_of_tile;
    load(tile, rows_of_tile);
    reduce(tile, rows_of_tile);
  }
  if (lane < run) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      bounds[(int64_t{kv_head} * kGroup + h) * count + first + lane] = kept[h];
    }
  }
}

template <int kGroup>
cudaError_t LaunchTokensInt4(const float* q, int64_t q_stride, const PagedKvLayout& layout,
                             const BlockEstimator& estimator, const std::byte* summaries,
                             const int32_t* summary_ids, const int32_t* query_rows, int32_t count,
                             float* bounds, cudaStream_t stream) {
  const int64_t bytes = SummaryBytes(layout, estimator);
  const auto launch = [&](auto head_dim, auto paired) {
    constexpr int kHeadDim = decltype(head_dim)::value;
    constexpr int kWarps = TokensWarps(kHeadDim);
    const dim3 grid(static_cast<unsigned>(CeilDiv(count, kWarps * kRunCandidates)),
                    static_cast<unsigned>(layout.num_kv_heads));
    return LaunchKernel(ScoreTokensInt4Kernel<kGroup, kHeadDim, decltype(paired)::value>, grid,
                        kWarps * kWarp, 0, stream, q, q_stride, layout.num_kv_heads,
                        estimator.boxes, summaries, bytes, summary_ids, query_rows, count,
                        BoxCombiner::Of(estimator, layout.head_dim), bounds);
  };
  const auto with_head_dim = [&](auto paired) {
    switch (layout.head_dim) {
      case 64:
        return launch(std::integral_constant<int, 64>{}, paired);
      case 128:
        return launch(std::integral_constant<int, 128>{}, paired);
      default:
        return launch(std::integral_constant<int, 256>{}, paired);
    }
  };
  return estimator.boxes == 4 ? with_head_dim(std::true_type{}) : with_head_dim(std::false_type{});
}

// Any head_dim, stride or alignment: a warp per (candidate, KV head), scalar loads, one query
// head at a time. At radius 0 (box_rows 1) a box's hi row is its lo row.
template <typename Value>
__global__ void __launch_bounds__(kThreads)
    ScoreBlocksScalarKernel(const float* __restrict__ q, int64_t q_stride, int32_t group,
                            int32_t num_kv_heads, int32_t head_dim, int32_t boxes, int32_t box_rows,
                            const std::byte* __restrict__ summaries, int64_t summary_bytes,
                            const int32_t* __restrict__ summary_ids,
                            const int32_t* __restrict__ query_rows, int32_t count,
                            BoxCombiner combine, float* __restrict__ bounds) {
  WaitForPriorGrids();
  const int64_t task = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  if (task >= int64_t{count} * num_kv_heads) return;  // the whole warp
  const int lane = threadIdx.x % kWarp;
  const int32_t i = static_cast<int32_t>(task / num_kv_heads);
  const int32_t kv_head = static_cast<int32_t>(task % num_kv_heads);
  const std::byte* summary = summaries + summary_ids[i] * summary_bytes;
  const float* q_heads = q + query_rows[i] * q_stride + int64_t{kv_head} * group * head_dim;
  for (int32_t h = 0; h < group; ++h) {
    const float* q_head = q_heads + int64_t{h} * head_dim;
    float best = NaN();  // Merge keeps a box's number over NaN
    for (int32_t box = 0; box < boxes; ++box) {
      const int32_t lo_row = (kv_head * boxes + box) * box_rows;
      const int32_t hi_row = lo_row + box_rows - 1;
      const Value* lo = RowAt<Value>(summary, lo_row, head_dim);
      const Value* hi = RowAt<Value>(summary, hi_row, head_dim);
      float lo_scale = 0.0f;
      float hi_scale = 0.0f;
      if constexpr (kScaled<Value>) {  // a scale may be unaligned: the rows' bytes need not be
        const int32_t rows = num_kv_heads * boxes * box_rows;
        memcpy(&lo_scale, summary + ScaleOffset<Value>(rows, head_dim, lo_row), sizeof(float));
        memcpy(&hi_scale, summary + ScaleOffset<Value>(rows, head_dim, hi_row), sizeof(float));
      }
      float acc = 0.0f;
      for (int32_t d = lane; d < head_dim; d += kWarp) {
        acc = AddBound(q_head[d], Read(lo, d, lo_scale), Read(hi, d, hi_scale), acc);
      }
      best = combine.Merge(best, WarpSum(acc));
    }
    if (lane == 0) bounds[(int64_t{kv_head} * group + h) * count + i] = best;
  }
}

template <int kVectors, typename Value>
cudaError_t LaunchTiledScore(dim3 grid, size_t shared_bytes, cudaStream_t stream, const float* q,
                             int64_t q_stride, int32_t group, const PagedKvLayout& layout,
                             const BlockEstimator& estimator, const std::byte* summaries,
                             const int32_t* summary_ids, const int32_t* query_rows, int32_t count,
                             float* bounds) {
  const int64_t bytes = SummaryBytes(layout, estimator);
  return SummaryBoxRows(estimator) == 1
             ? LaunchKernel(ScoreBlocksKernel<kVectors, Value, 1>, grid, kThreads, shared_bytes,
                            stream, q, q_stride, group, layout.num_kv_heads, layout.head_dim,
                            estimator.boxes, summaries, bytes, summary_ids, query_rows, count,
                            BoxCombiner::Of(estimator, layout.head_dim), bounds)
             : LaunchKernel(ScoreBlocksKernel<kVectors, Value, 2>, grid, kThreads, shared_bytes,
                            stream, q, q_stride, group, layout.num_kv_heads, layout.head_dim,
                            estimator.boxes, summaries, bytes, summary_ids, query_rows, count,
                            BoxCombiner::Of(estimator, layout.head_dim), bounds);
}

// Whether ScoreTokensInt4Kernel takes the call: int4 rows at radius 0, a head_dim of 64, 128 or
// 256, boxes in groups of 8 rows, a group of at most 4 query heads (the product's 8 columns hold
// two terms of each) and aligned vectors.
bool TokensInt4Fits(const float* q, int64_t q_stride, int32_t group, const PagedKvLayout& layout,
                    const BlockEstimator& estimator, const std::byte* summaries) {
  const int32_t dim = layout.head_dim;
  if (estimator.precision != SummaryPrecision::kInt4 || SummaryBoxRows(estimator) != 1 ||
      (dim != 64 && dim != 128 && dim != 256) || group < 1 || group > 4 ||
      layout.num_kv_heads > 65535) {
    return false;
  }
  return (estimator.boxes == 4 || (estimator.boxes > 0 && estimator.boxes % 8 == 0)) &&
         q_stride % 4 == 0 && Aligned(q, 16) && Aligned(summaries, 8) &&
         SummaryBytes(layout, estimator) % 8 == 0;
}

template <typename Value>
cudaError_t LaunchScore(const float* q, int64_t q_stride, int32_t group,
                        const PagedKvLayout& layout, const BlockEstimator& estimator,
                        const std::byte* summaries, const int32_t* summary_ids,
                        const int32_t* query_rows, int32_t count, float* bounds,
                        cudaStream_t stream) {
  if constexpr (kIsInt4<Value>) {
    if (TokensInt4Fits(q, q_stride, group, layout, estimator, summaries)) {
      const auto launch = [&](auto run) {
        return run(q, q_stride, layout, estimator, summaries, summary_ids, query_rows, count,
                   bounds, stream);
      };
      switch (group) {
        case 1:
          return launch(LaunchTokensInt4<1>);
        case 2:
          return launch(LaunchTokensInt4<2>);
        case 3:
          return launch(LaunchTokensInt4<3>);
        default:
          return launch(LaunchTokensInt4<4>);
      }
    }
  }
  const int32_t dim = layout.head_dim;
  const int32_t vectors = dim / (4 * kScoreLanes);
  // head_dim a multiple of 32 keeps every quad of every summary aligned, and integer scales too.
  const bool tiled = dim % (4 * kScoreLanes) == 0 && vectors <= 8 && q_stride % 4 == 0 &&
                     Aligned(q, 16) && Aligned(summaries, 16) && group <= kMaxTiledGroup &&
                     layout.num_kv_heads <= 65535;
  if (tiled) {
    const dim3 grid(static_cast<unsigned>(CeilDiv(count, kScoreTile)),
                    static_cast<unsigned>(layout.num_kv_heads));
    const size_t shared_bytes = size_t{kScoreTile} * group * sizeof(float);
    if (vectors <= 2) {
      return LaunchTiledScore<2, Value>(grid, shared_bytes, stream, q, q_stride, group, layout,
                                        estimator, summaries, summary_ids, query_rows, count,
                                        bounds);
    }
    if (vectors <= 4) {
      return LaunchTiledScore<4, Value>(grid, shared_bytes, stream, q, q_stride, group, layout,
                                        estimator, summaries, summary_ids, query_rows, count,
                                        bounds);
    }
    return LaunchTiledScore<8, Value>(grid, shared_bytes, stream, q, q_stride, group, layout,
                                      estimator, summaries, summary_ids, query_rows, count, bounds);
  }
  const int64_t grid = CeilDiv(int64_t{count} * layout.num_kv_heads, kWarpsPerBlock);
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;
  return LaunchKernel(ScoreBlocksScalarKernel<Value>, static_cast<unsigned>(grid), kThreads, 0,
                      stream, q, q_stride, group, layout.num_kv_heads, dim, estimator.boxes,
                      SummaryBoxRows(estimator), summaries, SummaryBytes(layout, estimator),
                      summary_ids, query_rows, count, BoxCombiner::Of(estimator, dim), bounds);
}

}  // namespace

cudaError_t LaunchSummarizeBlocks(const void* blocks, const PagedKvLayout& layout,
                                  const BlockEstimator& estimator, const int32_t* block_ids,
                                  const int32_t* summary_ids, int32_t count, void* summaries,
                                  cudaStream_t stream) {
  if (count < 0 || !Positive(layout) || layout.type != DType::kBF16 ||
      !ValidateEstimator(estimator, layout).ok()) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  const int64_t tasks = int64_t{count} * layout.num_kv_heads * estimator.boxes;
  const int64_t grid = CeilDiv(tasks, kWarpsPerBlock);
  if (grid > INT_MAX) return cudaErrorInvalidConfiguration;
  const auto* keys = static_cast<const bf16*>(blocks);
  auto* out = static_cast<std::byte*>(summaries);
  const bool vectors = layout.head_dim % 8 == 0 && Aligned(blocks, 16) && Aligned(summaries, 16);
  const auto blocks_x = static_cast<unsigned>(grid);
  switch (estimator.precision) {
    case SummaryPrecision::kBf16:
      return LaunchSummarize<bf16>(vectors, blocks_x, stream, keys, layout, estimator, block_ids,
                                   summary_ids, tasks, out);
    case SummaryPrecision::kInt8:
      return LaunchSummarize<int8_t>(vectors, blocks_x, stream, keys, layout, estimator, block_ids,
                                     summary_ids, tasks, out);
    case SummaryPrecision::kInt4:
      return LaunchSummarize<Int4x2>(vectors, blocks_x, stream, keys, layout, estimator, block_ids,
                                     summary_ids, tasks, out);
    case SummaryPrecision::kF32:
      break;
  }
  return LaunchSummarize<float>(vectors, blocks_x, stream, keys, layout, estimator, block_ids,
                                summary_ids, tasks, out);
}

cudaError_t LaunchScoreBlocks(const float* q, int64_t q_stride, int32_t num_heads,
                              const PagedKvLayout& layout, const BlockEstimator& estimator,
                              const void* summaries, const int32_t* summary_ids,
                              const int32_t* query_rows, int32_t count, float* bounds,
                              cudaStream_t stream) {
  if (count < 0 || !Positive(layout) || num_heads <= 0 || num_heads % layout.num_kv_heads != 0 ||
      !ValidateEstimator(estimator, layout).ok()) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  const int32_t group = num_heads / layout.num_kv_heads;
  const auto* stored = static_cast<const std::byte*>(summaries);
  switch (estimator.precision) {
    case SummaryPrecision::kBf16:
      return LaunchScore<bf16>(q, q_stride, group, layout, estimator, stored, summary_ids,
                               query_rows, count, bounds, stream);
    case SummaryPrecision::kInt8:
      return LaunchScore<int8_t>(q, q_stride, group, layout, estimator, stored, summary_ids,
                                 query_rows, count, bounds, stream);
    case SummaryPrecision::kInt4:
      return LaunchScore<Int4x2>(q, q_stride, group, layout, estimator, stored, summary_ids,
                                 query_rows, count, bounds, stream);
    case SummaryPrecision::kF32:
      break;
  }
  return LaunchScore<float>(q, q_stride, group, layout, estimator, stored, summary_ids, query_rows,
                            count, bounds, stream);
}

// --- AggregateScores ---------------------------------------------------------------------------
// Two grids, so that the work spreads over many SMs whatever the number of segments (a step has
// one a sparse row: a few): first a block a (segment, head) for its softmax maximum and total over
// the segment's candidates (a read of its bounds, an exp a bound), then blocks over tiles of each
// segment's candidates whose warps share out the heads (a thread's doubles' exps, one a head, were
// the second grid's latency when a thread took every head). Each grid reads the step's bounds (a
// few MB) once.
namespace {

__global__ void __launch_bounds__(kThreads)
    HeadSoftmaxStatsKernel(const float* __restrict__ bounds, int32_t num_heads, int64_t stride,
                           const ScoreSegment* __restrict__ segments,
                           double* __restrict__ head_stats) {
  WaitForPriorGrids();
  __shared__ float reduce_float[kWarpsPerBlock];
  __shared__ double reduce_double[kWarpsPerBlock];
  const ScoreSegment segment = segments[blockIdx.x];
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  if (segment.count <= 0 || segment.aggregate == HeadAggregate::kMax) return;
  const float* row = bounds + int64_t{head} * stride + segment.first;
  const double scale = segment.logit_scale;
  float local_max = -INFINITY;
  for (int32_t i = threadIdx.x; i < segment.count; i += kThreads) {
    local_max = fmaxf(local_max, row[i]);
  }
  const double max_logit = scale * BlockReduce(local_max, -INFINITY, MaxFloat{}, reduce_float);
  double local_total = 0.0;
  for (int32_t i = threadIdx.x; i < segment.count; i += kThreads) {
    local_total += exp(scale * row[i] - max_logit);
  }
  const double total = BlockReduce(local_total, 0.0, Add{}, reduce_double);
  if (threadIdx.x == 0) {
    double* stats = head_stats + 2 * (int64_t{blockIdx.x} * num_heads + head);
    stats[0] = max_logit;
    stats[1] = total;
  }
}

// A tile of a warp's width of candidates a pass: warp w takes heads w, w + 8, ..., and warp 0
// combines the eight partial results in warp order (a NaN bound makes the maximum NaN in any
// order; the softmax shares are summed in doubles).
__global__ void __launch_bounds__(kThreads)
    AggregateScoresKernel(const float* __restrict__ bounds, int32_t num_heads, int64_t stride,
                          const ScoreSegment* __restrict__ segments,
                          const double* __restrict__ head_stats, float* __restrict__ scores) {
  WaitForPriorGrids();
  __shared__ double partial[kWarpsPerBlock][kWarp];
  const ScoreSegment segment = segments[blockIdx.x];
  const int32_t set = static_cast<int32_t>(blockIdx.y);
  if (set >= segment.num_sets || segment.count <= 0) return;
  const int32_t heads = num_heads / segment.num_sets;
  const float* set_bounds = bounds + int64_t{set} * heads * stride + segment.first;
  float* out = scores + segment.scores_first + int64_t{set} * segment.count;
  const double* stats = head_stats + 2 * (int64_t{blockIdx.x} * num_heads + int64_t{set} * heads);
  const double scale = segment.logit_scale;
  const bool by_max = segment.aggregate == HeadAggregate::kMax;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const auto keep_max = [](float score, float bound) {
    return isnan(score) || bound <= score ? score : bound;  // a NaN, once met, stays
  };
  for (int32_t tile = static_cast<int32_t>(blockIdx.z) * kWarp; tile < segment.count;
       tile += static_cast<int32_t>(gridDim.z) * kWarp) {
    const int32_t i = tile + lane;
    if (i < segment.count) {
      if (by_max) {
        float score = -INFINITY;
        for (int32_t h = warp; h < heads; h += kWarpsPerBlock) {
          score = keep_max(score, set_bounds[h * stride + i]);
        }
        partial[warp][lane] = score;
      } else {
        double sum = 0.0;
        for (int32_t h = warp; h < heads; h += kWarpsPerBlock) {
          sum += exp(scale * set_bounds[h * stride + i] - stats[2 * h]) / stats[2 * h + 1];
        }
        partial[warp][lane] = sum;
      }
    }
    __syncthreads();
    if (warp == 0 && i < segment.count) {
      if (by_max) {
        float score = -INFINITY;
        for (int w = 0; w < kWarpsPerBlock; ++w) {
          score = keep_max(score, static_cast<float>(partial[w][lane]));
        }
        out[i] = score;
      } else {
        double sum = 0.0;
        for (int w = 0; w < kWarpsPerBlock; ++w) sum += partial[w][lane];
        out[i] = static_cast<float>(sum);
      }
    }
    __syncthreads();
  }
}

// A segment's candidates over kDrawTiles blocks: a block a segment left most SMs idle at a few
// long rows, each candidate a hash.
constexpr int kDrawTiles = 8;

__global__ void __launch_bounds__(kThreads)
    DrawSyntheticScoresKernel(const int32_t* __restrict__ summary_ids,
                              const ScoreSegment* __restrict__ segments,
                              const int32_t* __restrict__ step, SyntheticPicks picks, int32_t layer,
                              float* __restrict__ scores) {
  WaitForPriorGrids();
  const ScoreSegment segment = segments[blockIdx.x];
  const int32_t set = static_cast<int32_t>(blockIdx.y);
  if (set >= segment.num_sets) return;
  const int32_t now = *step;
  float* out = scores + segment.scores_first + int64_t{set} * segment.count;
  for (int32_t i = static_cast<int32_t>(blockIdx.z * kThreads + threadIdx.x); i < segment.count;
       i += kDrawTiles * kThreads) {
    out[i] = SyntheticScore(picks, summary_ids[segment.first + i], layer, set, now);
  }
}

}  // namespace

int64_t AggregateScoresScratchDoubles(int32_t num_heads, int32_t num_segments) {
  return 2 * int64_t{std::max(num_heads, 1)} * std::max(num_segments, 1);
}

cudaError_t LaunchAggregateScores(const float* bounds, int32_t num_heads, int64_t bound_stride,
                                  const ScoreSegment* segments, int32_t num_segments,
                                  int32_t max_sets, double* head_stats, float* scores,
                                  cudaStream_t stream) {
  if (num_heads <= 0 || num_heads > kAggregateMaxHeads || max_sets <= 0 || max_sets > 65535 ||
      num_segments < 0 || num_segments > 65535) {
    return cudaErrorInvalidValue;
  }
  if (num_segments == 0) return cudaSuccess;
  const auto segments_x = static_cast<unsigned>(num_segments);
  cudaError_t launched =
      LaunchKernel(HeadSoftmaxStatsKernel, dim3(segments_x, static_cast<unsigned>(num_heads)),
                   kThreads, 0, stream, bounds, num_heads, bound_stride, segments, head_stats);
  if (launched != cudaSuccess) return launched;
  // Tiles enough for an even share of the candidates a segment, twice over for uneven ones.
  const int64_t chunks = 2 * CeilDiv(CeilDiv(bound_stride, num_segments), kWarp);
  const auto chunks_z = static_cast<unsigned>(std::clamp<int64_t>(chunks, 1, 65535));
  return LaunchKernel(AggregateScoresKernel,
                      dim3(segments_x, static_cast<unsigned>(max_sets), chunks_z), kThreads, 0,
                      stream, bounds, num_heads, bound_stride, segments,
                      static_cast<const double*>(head_stats), scores);
}

cudaError_t LaunchDrawSyntheticScores(const int32_t* summary_ids, const ScoreSegment* segments,
                                      int32_t num_segments, int32_t max_sets, const int32_t* step,
                                      const SyntheticPicks& picks, int32_t layer, float* scores,
                                      cudaStream_t stream) {
  if (max_sets <= 0 || max_sets > 65535 || num_segments < 0 || picks.period_q < 1024) {
    return cudaErrorInvalidValue;
  }
  if (num_segments == 0) return cudaSuccess;
  return LaunchKernel(
      DrawSyntheticScoresKernel,
      dim3(static_cast<unsigned>(num_segments), static_cast<unsigned>(max_sets), kDrawTiles),
      kThreads, 0, stream, summary_ids, segments, step, picks, layer, scores);
}

}  // namespace pulse::cuda
