// The backend boundary: a Backend owns memory and streams and runs every op of the forward pass.
// The CPU backend (backend/cpu) is the reference; the CUDA backend is tested against it op by op.
//
// All pointers passed to ops are this backend's memory ("device" memory; host memory on the CPU
// backend) unless said otherwise. Activations are fp32. Ops are enqueued in order on the
// backend's compute stream and may run asynchronously; Synchronize() waits for all of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/base/status.h"

namespace pulse {

class Backend;

// Storage type of a weight matrix. Math is always fp32 accumulation.
enum class WeightType : uint8_t { kF32, kBF16 };

std::string_view WeightTypeName(WeightType type);
size_t WeightTypeBytes(WeightType type);

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
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

struct Weight {
  DeviceBuffer buffer;
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  MatrixView view() const { return {buffer.data(), type, rows, cols}; }
};

// Shape of one block of the paged KV cache. A block holds `block_tokens` tokens of one layer:
// keys [num_kv_heads][block_tokens][head_dim] followed by values of the same shape, so one block
// is one contiguous chunk of block_elems() fp32 values.
struct PagedKvLayout {
  int32_t block_tokens = 32;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  int64_t head_elems() const { return int64_t{block_tokens} * head_dim; }
  int64_t block_elems() const { return 2 * int64_t{num_kv_heads} * head_elems(); }
};

// One layer's paged KV cache for a batch of sequences, as every attention kernel sees it.
// Sequence s owns the query rows [q_offsets[s], q_offsets[s+1]) of the step's token array; those
// queries are the last (q_offsets[s+1] - q_offsets[s]) positions of its kv_lens[s] cached tokens,
// and attend causally. Logical block j of sequence s is block_tables[s * max_blocks_per_seq + j].
struct PagedKvBatch {
  float* blocks = nullptr;  // block b starts at blocks + b * layout.block_elems()
  PagedKvLayout layout;
  int32_t num_seqs = 0;
  int32_t max_blocks_per_seq = 0;
  const int32_t* block_tables = nullptr;  // [num_seqs * max_blocks_per_seq]
  const int32_t* kv_lens = nullptr;       // [num_seqs]
  const int32_t* q_offsets = nullptr;     // [num_seqs + 1]
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;

  // --- memory -----------------------------------------------------------------------------
  // Returns ResourceExhausted when the backend cannot provide `bytes`.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Uploads a host fp32 matrix [rows][cols] into backend memory as `type`.
  virtual absl::StatusOr<Weight> UploadWeight(std::span<const float> values, int64_t rows,
                                              int64_t cols, WeightType type) = 0;
  // Copies host memory into backend memory; `src` may be reused when the call returns.
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Waits for the ops enqueued so far, then copies backend memory to host memory.
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Synchronize() = 0;

  // --- ops --------------------------------------------------------------------------------
  // out[i] = table row tokens[i], for i < count.
  virtual void Embed(const MatrixView& table, const int32_t* tokens, int64_t count, float* out) = 0;
  // y[m][w.rows] = x[m][w.cols] * w^T (+ bias[w.rows] when bias is not null).
  virtual void Gemm(const float* x, int64_t m, const MatrixView& w, const float* bias,
                    float* y) = 0;
  // y = x / rms(x) * weight, row-wise over rows x cols.
  virtual void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t cols, float eps,
                       float* y) = 0;
  // residual += x; y = RmsNorm(residual).
  virtual void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows,
                          int64_t cols, float eps, float* y) = 0;
  // Rotary embedding in the rotate-half (Hugging Face) convention, in place: for each of `rows`
  // rows (row r starts at x + r * row_stride) and each of num_heads heads of head_dim, pairs
  // (i, i + head_dim/2) rotate by positions[r] * inv_freq[i].
  virtual void Rope(float* x, int64_t rows, int64_t row_stride, int32_t num_heads, int32_t head_dim,
                    const int32_t* positions, const float* inv_freq) = 0;
  // out[m][inter] = silu(gate_up[m][0:inter]) * gate_up[m][inter:2*inter].
  virtual void SwiGlu(const float* gate_up, int64_t m, int64_t inter, float* out) = 0;
  // Writes each query row's new key and value (row r: k at k + r*row_stride, v likewise, each
  // [num_kv_heads][head_dim]) into its slot of the paged cache.
  virtual void AppendKv(const float* k, const float* v, int64_t row_stride,
                        const PagedKvBatch& kv) = 0;
  // Causal GQA attention: q rows as PagedKvBatch describes, each [num_heads][head_dim] at
  // q + r*q_stride; out rows [num_heads][head_dim] contiguous. Softmax scale `scale`.
  virtual void Attention(const float* q, int64_t q_stride, int32_t num_heads,
                         const PagedKvBatch& kv, float scale, float* out) = 0;
  // out[i] = x row rows[i] (cols values each), for i < count.
  virtual void GatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t count,
                          float* out) = 0;

 protected:
  friend class DeviceBuffer;
  virtual void Free(void* data, size_t bytes) = 0;
};

}  // namespace pulse
