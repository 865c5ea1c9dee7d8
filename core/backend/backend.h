// The backend boundary: a Backend owns memory and streams and runs every op of the forward pass.
// The CPU backend (backend/cpu) is the reference; the CUDA backend is tested against it op by op.
//
// All pointers passed to ops are this backend's memory ("device" memory; host memory on the CPU
// backend) unless said otherwise. The residual stream, GEMM outputs, Q/K/V rows and logits are
// fp32; the activations that feed a GEMM (written by RmsNorm, AddRmsNorm, SwiGlu, Attention and
// GatherRows, read by Gemm) are of the backend's activation_type(), and the KV cache of its
// kv_type(). Ops are enqueued in order on the backend's compute stream and may run
// asynchronously: an op that fails is recorded, and the next Synchronize() or CopyToHost()
// returns that failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/backend/dtype.h"
#include "core/backend/paged_kv.h"
#include "core/backend/sampling.h"
#include "core/base/status.h"

namespace pulse {

class Backend;

// Move-only owner of one allocation of a backend's memory; frees it on destruction.
// The backend must outlive its buffers.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* data, size_t bytes)
      : owner_(owner), data_(data), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

 private:
  void Reset();

  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A row-major weight matrix [rows][cols] in backend memory (rows = output features).
struct MatrixView {
  const void* data = nullptr;
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

struct Weight {
  DeviceBuffer buffer;
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  MatrixView view() const { return {buffer.data(), type, rows, cols}; }
};

// The bytes of a [rows][cols] weight of `type` made from `values`: InvalidArgument for a bad
// shape or a value count that does not match it, ResourceExhausted when it cannot be addressed.
absl::StatusOr<size_t> WeightBytes(std::span<const float> values, int64_t rows, int64_t cols,
                                   DType type);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;

  // Element type of the activations that feed a GEMM.
  virtual DType activation_type() const = 0;
  // Element type of the KV cache (PagedKvLayout::type).
  virtual DType kv_type() const = 0;
  // OK when Attention supports `num_heads` query heads over caches of `layout`; Unimplemented
  // (saying why) otherwise.
  virtual absl::Status CheckAttention(int32_t num_heads, const PagedKvLayout& layout) const = 0;

  // --- memory -----------------------------------------------------------------------------
  // Returns ResourceExhausted when the backend cannot provide `bytes`.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Bytes that Allocate can still provide, or 0 when the backend has no limit of its own (the
  // CPU backend without a memory limit).
  virtual size_t AvailableBytes() const = 0;
  // Uploads a host fp32 matrix [rows][cols] into backend memory as `type`.
  virtual absl::StatusOr<Weight> UploadWeight(std::span<const float> values, int64_t rows,
                                              int64_t cols, DType type) = 0;
  // Copies host memory into backend memory; `src` may be reused when the call returns.
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Waits for the ops enqueued so far, then copies backend memory to host memory. Returns the
  // first failure of an op since the last Synchronize or CopyToHost (then `dst` is unspecified).
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits for the ops enqueued so far; returns the first failure of one since the last
  // Synchronize or CopyToHost.
  virtual absl::Status Synchronize() = 0;

  // --- ops --------------------------------------------------------------------------------
  // "act" buffers are of activation_type().
  // out[i] = table row tokens[i], for i < count.
  virtual void Embed(const MatrixView& table, const int32_t* tokens, int64_t count, float* out) = 0;
  // y[m][w.rows] = x[m][w.cols] (act) * w^T (+ bias[w.rows] when bias is not null).
  virtual void Gemm(const void* x, int64_t m, const MatrixView& w, const float* bias, float* y) = 0;
  // y (act) = x / rms(x) * weight, row-wise over rows x cols.
  virtual void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t cols, float eps,
                       void* y) = 0;
  // residual += x; y (act) = RmsNorm(residual).
  virtual void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows,
                          int64_t cols, float eps, void* y) = 0;
  // Rotary embedding in the rotate-half (Hugging Face) convention, in place: for each of `rows`
  // rows (row r starts at x + r * row_stride) and each of num_heads heads of head_dim, pairs
  // (i, i + head_dim/2) rotate by positions[r] * inv_freq[i].
  virtual void Rope(float* x, int64_t rows, int64_t row_stride, int32_t num_heads, int32_t head_dim,
                    const int32_t* positions, const float* inv_freq) = 0;
  // out[m][inter] (act) = silu(gate_up[m][0:inter]) * gate_up[m][inter:2*inter].
  virtual void SwiGlu(const float* gate_up, int64_t m, int64_t inter, void* out) = 0;
  // Writes each query row's new key and value (row r: k at k + r*row_stride, v likewise, each
  // [num_kv_heads][head_dim]) into its slot of the paged cache.
  virtual void AppendKv(const float* k, const float* v, int64_t row_stride,
                        const PagedKvBatch& kv) = 0;
  // Causal GQA attention: q rows as PagedKvBatch describes, each [num_heads][head_dim] at
  // q + r*q_stride; out (act) rows [num_heads][head_dim] contiguous. Softmax scale `scale`.
  virtual void Attention(const float* q, int64_t q_stride, int32_t num_heads,
                         const PagedKvBatch& kv, float scale, void* out) = 0;
  // out[i] = x row rows[i] (cols values each, both act), for i < count.
  virtual void GatherRows(const void* x, int64_t cols, const int32_t* rows, int64_t count,
                          void* out) = 0;
  // tokens[r] = the token drawn from row r of logits [rows][vocab] with params[r], as
  // core/backend/sampling.h says (the same token on every backend), or -1 when the row cannot be
  // sampled. `history` holds the rows' distinct penalised ids (see TokenSampling).
  virtual void SampleTokens(const float* logits, int64_t rows, int64_t vocab,
                            const TokenSampling* params, const int32_t* history,
                            int32_t* tokens) = 0;

 protected:
  friend class DeviceBuffer;
  virtual void Free(void* data, size_t bytes) = 0;
};

}  // namespace pulse
