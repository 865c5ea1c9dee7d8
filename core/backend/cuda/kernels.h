// Launchers of the CUDA backend's kernels. Each enqueues its work on `stream` and returns the
// launch's error (cudaSuccess, or why the launch failed); errors of the work itself surface at
// the stream's next synchronisation. bf16 buffers are passed as void*; matrices are row-major.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend/paged_kv.h"
#include "core/backend/sampling.h"
#include "core/base/status.h"

namespace pulse::cuda {

// out[i][:] = float(table[tokens[i] - first_row][:]), or -0.0 where the table has no such row;
// table bf16 [rows][hidden].
cudaError_t LaunchEmbed(const void* table, int64_t rows, int64_t hidden, int64_t first_row,
                        const int32_t* tokens, int64_t count, float* out, cudaStream_t stream);
// y = bf16(x / rms(x) * weight), row-wise.
cudaError_t LaunchRmsNorm(const float* x, const float* weight, int64_t rows, int64_t cols,
                          float eps, void* y, cudaStream_t stream);
// residual += x; y = bf16(RmsNorm(residual)).
cudaError_t LaunchAddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows,
                             int64_t cols, float eps, void* y, cudaStream_t stream);
// Rotate-half rotary embedding in place; angles in double precision as the CPU backend does.
cudaError_t LaunchRope(float* x, int64_t rows, int64_t row_stride, int32_t num_heads,
                       int32_t head_dim, const int32_t* positions, const float* inv_freq,
                       cudaStream_t stream);
// out[m][inter] = bf16(silu(gate) * up) of gate_up [m][2 * inter].
cudaError_t LaunchSwiGlu(const float* gate_up, int64_t m, int64_t inter, void* out,
                         cudaStream_t stream);
// out[i][:] = x[rows[i]][:], bf16.
cudaError_t LaunchGatherRows(const void* x, int64_t cols, const int32_t* rows, int64_t count,
                             void* out, cudaStream_t stream);
// Writes each query row's key and value (fp32 at k / v + row * row_stride) into its bf16 slot.
cudaError_t LaunchAppendKv(const float* k, const float* v, int64_t row_stride,
                           const PagedKvBatch& kv, cudaStream_t stream);
// LaunchRope over the queries and keys of QKV rows ([num_heads][head_dim] queries, then
// kv.layout's keys and values) followed by LaunchAppendKv of the rotated keys and the values, in
// one kernel, with the same results bit for bit.
cudaError_t LaunchRopeAppendKv(float* qkv, int64_t row_stride, int32_t num_heads,
                               const int32_t* positions, const float* inv_freq,
                               const PagedKvBatch& kv, cudaStream_t stream);

// Decode attention (every sequence has one query row) split along the sequence. The number of
// splits for this batch, when `resident_blocks` thread blocks run at once on the device and the
// launch may have at most `max_blocks`: the one that fills the last wave of blocks best, the
// fewest splits among equals (longer splits cost less to set up and merge), none shorter than
// 256 tokens. Host arithmetic only.
int32_t DecodeAttentionSplits(const PagedKvBatch& kv, int32_t num_heads, int64_t resident_blocks,
                              int64_t max_blocks);
// Thread blocks of decode attention for `head_dim` that fit one SM at once (the occupancy
// calculator's answer for the kernel, its threads and shared memory).
absl::StatusOr<int32_t> DecodeAttentionBlocksPerSm(int32_t head_dim);
int64_t DecodeAttentionScratchFloats(const PagedKvBatch& kv, int32_t num_heads, int32_t splits);
cudaError_t LaunchDecodeAttention(const float* q, int64_t q_stride, int32_t num_heads,
                                  const PagedKvBatch& kv, float scale, int32_t splits,
                                  float* scratch, void* out, cudaStream_t stream);
// Causal attention of any rows (chunked prefill, mixed batches) on tensor cores.
cudaError_t LaunchPrefillAttention(const float* q, int64_t q_stride, int32_t num_heads,
                                   const PagedKvBatch& kv, float scale, void* out,
                                   cudaStream_t stream);
// tokens[r] = the token drawn from logits row r [vocab] as core/backend/sampling.h says (-1 when
// the row cannot be sampled); scratch holds SampleTokensScratchWords words.
int64_t SampleTokensScratchWords(int64_t rows, int64_t vocab);
cudaError_t LaunchSampleTokens(const float* logits, int64_t rows, int64_t vocab,
                               const TokenSampling* params, const int32_t* history,
                               uint32_t* scratch, int32_t* tokens, cudaStream_t stream);

// One piece of a gather (or scatter): `words` 16-byte words from src to dst, either of which may
// be mapped host memory.
struct GatherPiece {
  const void* src;
  void* dst;
  uint32_t words;
};
// The most bytes one GatherPiece moves: longer chunks are cut into pieces this long, so that a
// plan of a few large chunks still spreads over every warp.
inline constexpr uint32_t kGatherPieceBytes = 16 << 10;
// Copies pieces[0..count) (device memory) on at most `blocks` thread blocks, a warp a piece.
cudaError_t LaunchGather(const GatherPiece* pieces, int64_t count, int32_t blocks,
                         cudaStream_t stream);

// The head sizes the attention kernels are built for.
bool AttentionSupportsHeadDim(int32_t head_dim);

}  // namespace pulse::cuda
