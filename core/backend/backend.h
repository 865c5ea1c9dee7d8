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
#include <utility>

#include "core/backend/block_estimator.h"
#include "core/backend/block_scores.h"
#include "core/backend/copy_plan.h"
#include "core/backend/dtype.h"
#include "core/backend/paged_kv.h"
#include "core/backend/sampling.h"
#include "core/backend/sparse_tables.h"
#include "core/base/status.h"

namespace pulse {

class Backend;

enum class MemoryTier : uint8_t { kDevice, kHost };

// Move-only owner of one allocation of a backend's memory; frees it on destruction.
// The backend must outlive its buffers.
template <MemoryTier kTier>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend* owner, void* data, size_t bytes)
      : owner_(owner), data_(data), bytes_(bytes) {}
  BackendBuffer(BackendBuffer&& other) noexcept
      : owner_(std::exchange(other.owner_, nullptr)),
        data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  BackendBuffer& operator=(BackendBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      owner_ = std::exchange(other.owner_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { Reset(); }

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

// Device memory (Backend::Allocate).
using DeviceBuffer = BackendBuffer<MemoryTier::kDevice>;
// Host memory that the backend's copy engine and kernels use directly (Backend::AllocateHost).
using HostBuffer = BackendBuffer<MemoryTier::kHost>;

// A point in a backend's copy stream. EnqueueCopy arms it with the end of a plan; compute
// (WaitForCopy) and the host (CopyDone, SynchronizeCopy) wait for it. Events are reusable and
// owned by the caller: keep one per layer (or per micro-batch and layer) and re-arm it every
// step; arming forgets the plan it stood for before, as cudaEventRecord does. An event that was
// never armed has completed. An event belongs to the backend that created it, which must outlive
// it; use it from one thread at a time.
class CopyEvent {
 public:
  virtual ~CopyEvent() = default;
  CopyEvent(const CopyEvent&) = delete;
  CopyEvent& operator=(const CopyEvent&) = delete;

  const Backend* backend() const { return backend_; }

 protected:
  explicit CopyEvent(const Backend* backend) : backend_(backend) {}

 private:
  const Backend* backend_;
};

// A recorded sequence of compute ops (BeginCapture to EndCapture) that LaunchGraph replays with
// one call: a CUDA graph. The ops' arguments are baked in, so a graph is only valid while every
// buffer they name lives and holds what its replay should read; the caller rewrites the inputs
// in place between launches. Owned by the caller; belongs to the backend that made it, which
// must outlive it.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  const Backend* backend() const { return backend_; }

 protected:
  explicit StepGraph(const Backend* backend) : backend_(backend) {}

 private:
  const Backend* backend_;
};

// A row-major weight matrix [rows][cols] in backend memory (rows = output features); of a block
// type, each row is cols / 32 blocks.
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
// The same check for `blocks`, a [rows][cols] weight of block type `type`: InvalidArgument unless
// cols is a multiple of the type's block values (32, or 256 for a K-quant) and `blocks` holds
// exactly the rows' blocks.
absl::Status CheckWeightBlocks(std::span<const std::byte> blocks, int64_t rows, int64_t cols,
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
  // Uploads a weight kept in ggml's blocks (`type` a block type; `blocks` row after row, as
  // CheckWeightBlocks checks). Unimplemented where the backend does not compute on the type: the
  // caller then uploads the values with UploadWeight.
  virtual absl::StatusOr<Weight> UploadBlocks(std::span<const std::byte> blocks, int64_t rows,
                                              int64_t cols, DType type);
  // Copies host memory into backend memory; `src` may be reused when the call returns.
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Waits for the ops enqueued so far, then copies backend memory to host memory. Returns the
  // first failure of an op since the last Synchronize or CopyToHost (then `dst` is unspecified).
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits for the ops enqueued so far; returns the first failure of one since the last
  // Synchronize or CopyToHost.
  virtual absl::Status Synchronize() = 0;

  // --- host tier and copy engine -----------------------------------------------------------
  // The copy engine runs copy plans (copy_plan.h) on its own stream, in the order they were
  // enqueued, beside the compute stream: a CUDA stream of its own, a thread of its own on the CPU.
  // Per layer, all misses of the batch become one plan whose event the layer's attention waits
  // for; filled blocks go back to the host tier in a plan with after_compute set. Synchronize
  // waits for compute only: plans are waited for through their events.

  // Host memory that this backend's copy engine and kernels read and write directly (the host
  // tier): pinned and mapped on CUDA (the one pointer is valid on the host and the device),
  // aligned memory on the CPU. ResourceExhausted when it cannot be had (on CUDA: pinned).
  // Pinning costs about 0.8 s a GiB, fails well below physical memory (FACTS.md) and serializes
  // the device's streams while it runs: grow the host tier in chunks (say 1 GiB, each its own
  // HostBuffer) between steps as it fills, and read ResourceExhausted as "the tier is full".
  virtual absl::StatusOr<HostBuffer> AllocateHost(size_t bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<CopyEvent>> CreateCopyEvent() = 0;
  // Enqueues `plan` on the copy stream and arms `done` with its end; returns without waiting for
  // it. An empty plan only arms `done` (a marker, for CopySeconds). InvalidArgument, with nothing
  // enqueued, armed or touched, for a plan ValidateCopyPlan refuses or an event of another
  // backend. Host chunks must lie in AllocateHost memory: the CUDA gather kernel reads them
  // through its mapping, and other host memory would fault it.
  virtual absl::Status EnqueueCopy(const CopyPlan& plan, CopyEvent& done) = 0;
  // Compute ops enqueued after this call start after `event` has completed (CUDA: the compute
  // stream waits; CPU: the calling thread blocks until the copy thread has passed the event).
  virtual absl::Status WaitForCopy(const CopyEvent& event) = 0;
  // Whether `event` has completed, without waiting.
  virtual absl::StatusOr<bool> CopyDone(const CopyEvent& event) = 0;
  // Blocks the calling thread until `event` has completed; returns a failure of the copy engine.
  virtual absl::Status SynchronizeCopy(const CopyEvent& event) = 0;
  // Seconds from `start` to `end` on the copy stream, both armed and completed
  // (FailedPrecondition otherwise): a plan's time is from a marker enqueued before it to its own
  // event.
  virtual absl::StatusOr<double> CopySeconds(const CopyEvent& start, const CopyEvent& end) = 0;

  // --- graphs -----------------------------------------------------------------------------
  // Whether BeginCapture can work (CUDA: yes; CPU: no, every capture call is Unimplemented).
  virtual bool SupportsGraphs() const { return false; }
  // From now until EndCapture, the ops this thread enqueues are recorded, not run (other
  // threads' ops run as before). Capture only a sequence that already ran once uncaptured with
  // the same sizes: an op that would have to grow the backend's scratch memory fails the
  // capture. Unavailable while another thread captures; Unimplemented without graph support.
  virtual absl::Status BeginCapture() { return absl::UnimplementedError("no graph support"); }
  // Ends this thread's capture and returns the recorded ops as a graph ready to launch. Returns
  // the first failure of an op recorded since BeginCapture (then nothing was run and the caller
  // runs the ops uncaptured instead), FailedPrecondition when this thread is not capturing.
  virtual absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture() {
    return absl::UnimplementedError("no graph support");
  }
  // Enqueues `graph`'s ops on the compute stream, in order with the ops around it.
  // FailedPrecondition, with nothing enqueued, when the backend moved scratch memory the graph
  // reads since it was captured (capture it again); InvalidArgument for another backend's graph.
  virtual absl::Status LaunchGraph(const StepGraph& graph) {
    static_cast<void>(graph);
    return absl::UnimplementedError("no graph support");
  }

  // --- ops --------------------------------------------------------------------------------
  // "act" buffers are of activation_type().
  // out[i] = row tokens[i] - first_row of `table` for i < count, where the table holds it, and
  // -0.0 everywhere where it does not: the rows [first_row, first_row + table.rows) of a
  // vocabulary split over ranks, whose sum over the ranks is then exactly the owner's row
  // (x + -0.0 is x for every x).
  virtual void Embed(const MatrixView& table, int64_t first_row, const int32_t* tokens,
                     int64_t count, float* out) = 0;
  // y[m][w.rows] = x[m][w.cols] (act) * w^T (+ bias[w.rows] when bias is not null).
  virtual void Gemm(const void* x, int64_t m, const MatrixView& w, const float* bias, float* y) = 0;
  // y (act) = x / rms(x) * weight, row-wise over rows x cols. `weight` (here and in AddRmsNorm)
  // is a model weight: a backend may read it before the ops enqueued before this one finish, so
  // it must not be an op's output.
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
  // Rope of the queries and keys of QKV rows (row r at qkv + r * row_stride: num_heads query
  // heads, then kv.layout.num_kv_heads keys, then as many values, each head_dim wide), then
  // AppendKv of the rotated keys and the values: the same results, one kernel on CUDA.
  virtual void RopeAppendKv(float* qkv, int64_t rows, int64_t row_stride, int32_t num_heads,
                            const int32_t* positions, const float* inv_freq,
                            const PagedKvBatch& kv) {
    const int32_t kv_heads = kv.layout.num_kv_heads;
    const int32_t head_dim = kv.layout.head_dim;
    Rope(qkv, rows, row_stride, num_heads + kv_heads, head_dim, positions, inv_freq);
    const float* keys = qkv + int64_t{num_heads} * head_dim;
    AppendKv(keys, keys + int64_t{kv_heads} * head_dim, row_stride, kv);
  }
  // Causal GQA attention: q rows as PagedKvBatch describes, each [num_heads][head_dim] at
  // q + r*q_stride; out (act) rows [num_heads][head_dim] contiguous. Softmax scale `scale`.
  virtual void Attention(const float* q, int64_t q_stride, int32_t num_heads,
                         const PagedKvBatch& kv, float scale, void* out) = 0;
  // out[i] = x row rows[i] (cols values each, both act), for i < count.
  virtual void GatherRows(const void* x, int64_t cols, const int32_t* rows, int64_t count,
                          void* out) = 0;
  // Block summaries (core/backend/block_estimator.h, reference::SummarizeBlock): for i < count,
  // the summary under `estimator` of every key of block block_ids[i] of `blocks` (one layer's
  // cache of `layout`), stored at `estimator`'s precision as SummaryBytes lays it out, at
  // summaries + summary_ids[i] * SummaryBytes bytes. An entry whose block id is negative is
  // skipped (a step's list is padded to its shape).
  virtual void SummarizeBlocks(const void* blocks, const PagedKvLayout& layout,
                               const BlockEstimator& estimator, const int32_t* block_ids,
                               const int32_t* summary_ids, int32_t count, void* summaries) = 0;
  // For i < count and every query head h: bounds[h * count + i] = head h's estimate
  // (reference::BlockBound) over the summary (as SummarizeBlocks stores it) at summaries +
  // summary_ids[i] * SummaryBytes bytes, for the query row q + query_rows[i] * q_stride
  // ([num_heads][head_dim]). One call scores every candidate of every sparse row of a step.
  virtual void ScoreBlocks(const float* q, int64_t q_stride, int32_t num_heads,
                           const PagedKvLayout& layout, const BlockEstimator& estimator,
                           const void* summaries, const int32_t* summary_ids,
                           const int32_t* query_rows, int32_t count, float* bounds) = 0;
  // Each segment's scores from a step's bounds ([num_heads][bound_stride], as ScoreBlocks writes
  // them): for segment s of `segments` (num_segments of them) and set k < s.num_sets,
  // scores[s.scores_first + k * s.count + i] aggregates (s.aggregate) the bounds on candidate
  // s.first + i of query heads [k * g, (k + 1) * g), g = num_heads / s.num_sets, as
  // reference::AggregateHeadBounds does. `max_sets` bounds every segment's num_sets. The segments
  // must fit the bounds and the scores (reference::AggregateScores checks what the CPU backend is
  // given).
  virtual void AggregateScores(const float* bounds, int32_t num_heads, int64_t bound_stride,
                               const ScoreSegment* segments, int32_t num_segments, int32_t max_sets,
                               float* scores) = 0;
  // Each segment's scores drawn instead (block_scores.h, SyntheticPicks): for segment s and set
  // k < s.num_sets, scores[s.scores_first + k * s.count + i] = SyntheticScore(picks,
  // summary_ids[s.first + i], layer, k, *step), with `step` in backend memory
  // (reference::DrawSyntheticScores).
  virtual void DrawSyntheticScores(const int32_t* summary_ids, const ScoreSegment* segments,
                                   int32_t num_segments, int32_t max_sets, const int32_t* step,
                                   const SyntheticPicks& picks, int32_t layer, float* scores) = 0;
  // tokens[r] = the token drawn from row r of logits [rows][vocab] with params[r], as
  // core/backend/sampling.h says (the same token on every backend), or -1 when the row cannot be
  // sampled. `history` holds the rows' distinct penalised ids (see TokenSampling).
  virtual void SampleTokens(const float* logits, int64_t rows, int64_t vocab,
                            const TokenSampling* params, const int32_t* history,
                            int32_t* tokens) = 0;

  // --- the device-driven sparse step (sparse_tables.h) -------------------------------------
  // For each of the `num_segments` segments s and set k < s.num_sets (max_sets bounds them):
  // picked[s.picks_first + k * s.picks + j] for j < s.picks are the indices in [0, s.count) of
  // the s.picks candidates whose scores (scores[s.scores_first + k * s.count + i]) have the
  // smallest SelectionKey, the lower index first among equal keys, in increasing order
  // (reference::SelectTopBlocks).
  virtual void SelectTopBlocks(const float* scores, const ScoreSegment* segments,
                               int32_t num_segments, int32_t max_sets, int32_t* picked) = 0;
  // A layer's sparse block tables from its picks, offloaded picks resolved through the slot
  // directory: hits are stamped, misses take the least recently used slots the step has not
  // used (score-aware: the lowest score first) and are listed for EnqueueRecall, as
  // reference::BuildSparseTables does, bit for bit.
  virtual void BuildSparseTables(const SparseTableBuild& build) = 0;
  // Enqueues on the copy stream, after the compute enqueued so far, the recall of the misses of
  // `list` (written by the BuildSparseTables of `layer` enqueued before; read when the copy
  // runs) from the host tier into the slots of the layer's cache `layer_blocks` (slot s is block
  // first_slot + s of `layout`): whole blocks when num_sets is 1, else set k's key and value
  // fragments of KV head k. Arms `done` with its end. InvalidArgument, with nothing enqueued, for
  // an event of another backend.
  virtual absl::Status EnqueueRecall(const RecallList& list, int32_t num_sets,
                                     const HostTierView& host, int32_t layer, void* layer_blocks,
                                     int32_t first_slot, const PagedKvLayout& layout,
                                     CopyEvent& done) = 0;
  // Enqueues on the copy stream, after the compute enqueued so far, the write-back of `count`
  // entries (backend memory, read when the copy runs; a negative device block is skipped) of the
  // layer's cache `layer_blocks` into the host tier, and arms `done` with its end.
  virtual absl::Status EnqueueWriteBack(const WriteBackEntry* entries, int32_t count,
                                        const HostTierView& host, int32_t layer,
                                        const void* layer_blocks, const PagedKvLayout& layout,
                                        CopyEvent& done) = 0;
  // Frees the slots that hold any of the `count` host blocks `blocks` (backend memory) in every
  // set of `directory`.
  virtual void ForgetSlots(const SlotDirectoryView& directory, const int32_t* blocks,
                           int32_t count) = 0;
  // Keeps blocks that an offloaded sequence's resident set gave up (still whole in their dense
  // blocks, which nothing has reused yet) in the device tier where it has room: in each of the
  // `num_layers` layers (backend memory) and each set k, entry i of the `count` entries (backend
  // memory: dense block -> host block) takes the set's i-th free slot in increasing slot order,
  // if there is one, unless its host block already has a slot in the set; such a slot gets the
  // stamp 0 (older than any step's use: these are the first victims) and the lowest score. Then
  // every entry whose host block has a slot in the set is copied there (whole when the directory
  // has one set, else KV head k's key and value fragments): a slot that held the block already
  // gets the same bytes again. `max_sets` and `max_slots` bound the layers' directories (launch
  // shapes). Entries must name dense blocks below the directory's first slot and host blocks in
  // range (reference::AdoptFreeSlots, which the CPU backend runs, checks).
  virtual void AdoptFreeSlots(const SlotLayer* layers, int32_t num_layers, int32_t max_sets,
                              int32_t max_slots, const WriteBackEntry* entries, int32_t count,
                              const PagedKvLayout& layout) = 0;
  // How many times a caller has waited for the device since the backend was made: CopyToHost,
  // Synchronize and SynchronizeCopy each count once. A decode step should cost one (its tokens).
  virtual int64_t host_waits() const = 0;

 protected:
  template <MemoryTier>
  friend class BackendBuffer;
  virtual void Free(void* data, size_t bytes) = 0;
  virtual void FreeHost(void* data, size_t bytes) = 0;

  // `event` (a CopyEvent or StepGraph) as this backend's type E (const E for a const one), or
  // InvalidArgument when another backend made it.
  template <typename E, typename Event>
  absl::StatusOr<E*> OwnEvent(Event& event) const {
    if (event.backend() != this) {
      return absl::InvalidArgumentError("a copy event or graph made by another backend");
    }
    return static_cast<E*>(&event);
  }
};

template <MemoryTier kTier>
void BackendBuffer<kTier>::Reset() {
  if (owner_ != nullptr && data_ != nullptr) {
    if constexpr (kTier == MemoryTier::kDevice) {
      owner_->Free(data_, bytes_);
    } else {
      owner_->FreeHost(data_, bytes_);
    }
  }
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace pulse
