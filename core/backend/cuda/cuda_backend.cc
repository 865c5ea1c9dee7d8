#include "core/backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/backend/bf16.h"
#include "core/backend/cuda/block_summary_kernels.h"
#include "core/backend/cuda/copy_engine.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/handles.h"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/lt_gemm.h"
#include "core/backend/cuda/sparse_selection_kernels.h"
#include "core/base/thread_pool.h"

namespace pulse {
namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
constexpr size_t kMinAllocation = 256;
constexpr int32_t kMaxGatherBlocks = 1024;

class CudaCopyEvent final : public CopyEvent {
 public:
  CudaCopyEvent(const Backend* backend, cuda::UniqueEvent event)
      : CopyEvent(backend), event(std::move(event)) {}

  cuda::UniqueEvent event;
  bool armed = false;
  // Inside a graph capture, `event` is recorded as a node the graph records when it runs (so its
  // time can be read after a replay), and `join`, recorded right after it, is what compute waits
  // for within the graph; join_capture is the capture that recorded it.
  cuda::UniqueEvent join;
  uint64_t join_capture = 0;
};

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(const Backend* backend, cuda::UniqueGraphExec exec, uint64_t scratch_epoch)
      : StepGraph(backend), exec(std::move(exec)), scratch_epoch(scratch_epoch) {}

  cuda::UniqueGraphExec exec;
  uint64_t scratch_epoch;  // the backend's scratch memory when captured
};

// Ops enqueue under `mu_` (engines on several threads may share one model, hence one backend);
// the stream orders them. The first failure of an enqueued op is kept until a sync point
// returns it. A thread that captures a graph enqueues its ops on a capture stream of its own,
// so that other threads' ops keep running and never land in its graph.
class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::shared_ptr<Backend>> Create(const CudaBackendOptions& options) {
    auto backend = std::shared_ptr<CudaBackend>(new CudaBackend(options));
    PULSE_RETURN_IF_ERROR(backend->Init());
    return backend;
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    copy_engine_.reset();
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    gemm_.reset();
    attention_scratch_ = DeviceBuffer();
    sampling_scratch_ = DeviceBuffer();
    aggregate_scratch_ = DeviceBuffer();
    table_scratch_ = DeviceBuffer();
    gemm_workspace_ = DeviceBuffer();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "cuda"; }
  DType activation_type() const override { return DType::kBF16; }
  DType kv_type() const override { return DType::kBF16; }

  absl::Status CheckAttention(int32_t num_heads, const PagedKvLayout& layout) const override {
    if (layout.type != DType::kBF16) {
      return absl::UnimplementedError(
          absl::StrFormat("CUDA backend: a KV cache of %s, not bf16", DTypeName(layout.type)));
    }
    if (!cuda::AttentionSupportsHeadDim(layout.head_dim)) {
      return absl::UnimplementedError(absl::StrFormat(
          "CUDA backend: attention kernels are built for head_dim 64 and 128, not %d",
          layout.head_dim));
    }
    if (layout.num_kv_heads < 1 || num_heads % layout.num_kv_heads != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "CUDA backend: %d query heads over %d KV heads", num_heads, layout.num_kv_heads));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    const size_t size = std::max(bytes, kMinAllocation);
    {
      absl::MutexLock lock(&memory_mu_);
      if (memory_limit_ != 0 && size > memory_limit_ - live_bytes_) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "CUDA backend: cannot allocate %u bytes: %u of the %u-byte memory limit are in use",
            bytes, live_bytes_, memory_limit_));
      }
      live_bytes_ += size;
    }
    cudaSetDevice(device_);
    void* data = nullptr;
    if (const cudaError_t error = cudaMalloc(&data, size); error != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it
      ReleaseBytes(size);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "CUDA backend: cudaMalloc of %u bytes failed: %s", bytes, cudaGetErrorString(error)));
    }
    return DeviceBuffer(this, data, bytes);
  }

  size_t AvailableBytes() const override {
    cudaSetDevice(device_);
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
    absl::MutexLock lock(&memory_mu_);
    if (memory_limit_ != 0) free_bytes = std::min(free_bytes, memory_limit_ - live_bytes_);
    return free_bytes;
  }

  absl::StatusOr<Weight> UploadWeight(std::span<const float> values, int64_t rows, int64_t cols,
                                      DType type) override {
    if (type != DType::kBF16) {
      return absl::UnimplementedError(
          absl::StrFormat("CUDA backend: weights are stored as bf16, not %s", DTypeName(type)));
    }
    PULSE_ASSIGN_OR_RETURN(const size_t bytes, WeightBytes(values, rows, cols, type));
    std::vector<uint16_t> converted(values.size());
    host_pool_.ParallelFor(static_cast<int64_t>(values.size()), 1 << 20,
                           [&](int64_t begin, int64_t end) {
                             for (int64_t i = begin; i < end; ++i) {
                               converted[i] = F32ToBf16(values[i]);
                             }
                           });
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(bytes));
    PULSE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(buffer.data(), converted.data(), bytes, cudaMemcpyHostToDevice));
    return Weight{std::move(buffer), type, rows, cols};
  }

  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    absl::MutexLock lock(&mu_);
    if (Capturing()) {
      RecordStatus(absl::FailedPreconditionError("CopyToDevice inside a graph capture"));
      return;
    }
    Record(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "CopyToDevice");
  }

  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    absl::MutexLock lock(&mu_);
    if (Capturing()) return absl::FailedPreconditionError("CopyToHost inside a graph capture");
    if (bytes != 0) {
      Record(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyToHost");
    }
    host_waits_.fetch_add(1, std::memory_order_relaxed);
    return SynchronizeLocked();
  }

  absl::Status Synchronize() override {
    absl::MutexLock lock(&mu_);
    if (Capturing()) return absl::FailedPreconditionError("Synchronize inside a graph capture");
    host_waits_.fetch_add(1, std::memory_order_relaxed);
    return SynchronizeLocked();
  }

  absl::StatusOr<HostBuffer> AllocateHost(size_t bytes) override {
    const size_t size = std::max(bytes, kMinAllocation);
    PULSE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    absl::StatusOr<cuda::UniquePinned> pinned =
        cuda::AllocatePinned(size, cudaHostAllocMapped | cudaHostAllocPortable);
    if (!pinned.ok()) {
      absl::MutexLock lock(&memory_mu_);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "CUDA backend: cannot pin %u more bytes of host memory (%s); %u bytes are pinned: "
          "grow the host tier in smaller chunks, or give it less memory",
          bytes, pinned.status().message(), pinned_bytes_));
    }
    // The kernels and copies use the host pointer as it is: with unified addressing it is also
    // the device's.
    void* mapped = nullptr;
    PULSE_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&mapped, pinned->get(), 0));
    if (mapped != pinned->get()) {
      return absl::UnimplementedError(
          "CUDA backend: mapped host memory has a device address of its own (no unified "
          "addressing)");
    }
    {
      absl::MutexLock lock(&memory_mu_);
      pinned_bytes_ += size;
    }
    return HostBuffer(this, pinned->release(), bytes);
  }

  absl::StatusOr<std::unique_ptr<CopyEvent>> CreateCopyEvent() override {
    PULSE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    PULSE_ASSIGN_OR_RETURN(cuda::UniqueEvent event, cuda::CreateEvent(cudaEventDefault));
    return std::make_unique<CudaCopyEvent>(this, std::move(event));
  }

  absl::Status EnqueueCopy(const CopyPlan& plan, CopyEvent& done) override {
    PULSE_ASSIGN_OR_RETURN(CudaCopyEvent * event, OwnEvent<CudaCopyEvent>(done));
    PULSE_RETURN_IF_ERROR(ValidateCopyPlan(plan));
    cudaEvent_t after = nullptr;
    if (plan.after_compute) {
      // Another thread may re-record the marker before the copy stream waits for it: the plan
      // then waits for more compute than it needs, never less.
      absl::MutexLock lock(&mu_);
      if (Capturing()) {
        // A marker (an empty plan) is captured; a plan of host-planned chunks is not.
        if (!plan.chunks.empty()) {
          return absl::FailedPreconditionError("EnqueueCopy of chunks inside a graph capture");
        }
        return CaptureCopy(*event, std::nullopt);
      }
      PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_marker_.get(), stream_));
      after = compute_marker_.get();
    }
    if (!plan.chunks.empty()) PULSE_RETURN_IF_ERROR(InjectedFault("EnqueueCopy"));
    PULSE_RETURN_IF_ERROR(copy_engine_->Enqueue(plan, after, event->event.get()));
    event->armed = true;
    return absl::OkStatus();
  }

  absl::Status EnqueueRecall(const RecallList& list, int32_t num_sets, const HostTierView& host,
                             int32_t layer, void* layer_blocks, int32_t first_slot,
                             const PagedKvLayout& layout, CopyEvent& done) override {
    return EnqueueListCopy(done, "EnqueueRecall", [&](cudaStream_t stream) {
      return cuda::LaunchRecallList(list, num_sets, host, layer, layer_blocks, first_slot, layout,
                                    copy_gather_blocks_, stream);
    });
  }

  absl::Status EnqueueWriteBack(const WriteBackEntry* entries, int32_t count,
                                const HostTierView& host, int32_t layer, const void* layer_blocks,
                                const PagedKvLayout& layout, CopyEvent& done) override {
    return EnqueueListCopy(done, "EnqueueWriteBack", [&](cudaStream_t stream) {
      return cuda::LaunchWriteBackList(entries, count, host, layer, layer_blocks, layout,
                                       copy_gather_blocks_, stream);
    });
  }

  int64_t host_waits() const override { return host_waits_.load(std::memory_order_relaxed); }

  absl::Status WaitForCopy(const CopyEvent& event) override {
    PULSE_ASSIGN_OR_RETURN(const CudaCopyEvent* own, OwnEvent<const CudaCopyEvent>(event));
    absl::MutexLock lock(&mu_);
    if (Capturing()) {
      // Within a graph, compute waits for the copy branch this capture made.
      if (own->join_capture != capture_count_) {
        return absl::FailedPreconditionError(
            "WaitForCopy inside a graph capture, for a copy enqueued outside it");
      }
      PULSE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(capture_stream_.get(), own->join.get(), 0));
      return absl::OkStatus();
    }
    PULSE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, own->event.get(), 0));
    return absl::OkStatus();
  }

  absl::StatusOr<bool> CopyDone(const CopyEvent& event) override {
    PULSE_ASSIGN_OR_RETURN(const CudaCopyEvent* own, OwnEvent<const CudaCopyEvent>(event));
    return cuda::EventCompleted(own->event.get());
  }

  absl::Status SynchronizeCopy(const CopyEvent& event) override {
    PULSE_ASSIGN_OR_RETURN(const CudaCopyEvent* own, OwnEvent<const CudaCopyEvent>(event));
    host_waits_.fetch_add(1, std::memory_order_relaxed);
    PULSE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(own->event.get()));
    return absl::OkStatus();
  }

  absl::StatusOr<double> CopySeconds(const CopyEvent& start, const CopyEvent& end) override {
    PULSE_ASSIGN_OR_RETURN(const CudaCopyEvent* from, OwnEvent<const CudaCopyEvent>(start));
    PULSE_ASSIGN_OR_RETURN(const CudaCopyEvent* to, OwnEvent<const CudaCopyEvent>(end));
    if (!from->armed || !to->armed) {
      return absl::FailedPreconditionError("CopySeconds: an event was never armed");
    }
    for (const CudaCopyEvent* event : {from, to}) {
      PULSE_ASSIGN_OR_RETURN(const bool completed, cuda::EventCompleted(event->event.get()));
      if (!completed)
        return absl::FailedPreconditionError("CopySeconds: an event has not completed");
    }
    float ms = 0;
    PULSE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, from->event.get(), to->event.get()));
    return ms / 1e3;
  }

  bool SupportsGraphs() const override { return true; }

  absl::Status BeginCapture() override {
    absl::MutexLock lock(&mu_);
    if (capture_.active) {
      return absl::UnavailableError(capture_.thread == std::this_thread::get_id()
                                        ? "this thread is capturing a graph already"
                                        : "another thread is capturing a graph");
    }
    PULSE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    if (capture_stream_ == nullptr) {
      PULSE_ASSIGN_OR_RETURN(capture_stream_, cuda::CreateStream());
      PULSE_ASSIGN_OR_RETURN(capture_copy_stream_,
                             cuda::CreateStream(cuda::StreamPriority::kHighest));
      PULSE_ASSIGN_OR_RETURN(capture_fork_, cuda::CreateEvent(cudaEventDisableTiming));
    }
    ++capture_count_;
    // Thread-local mode: other threads may allocate, free and synchronize meanwhile.
    PULSE_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(capture_stream_.get(), cudaStreamCaptureModeThreadLocal));
    capture_ = Capture{.active = true, .thread = std::this_thread::get_id(), .error = {}};
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture() override {
    absl::MutexLock lock(&mu_);
    if (!Capturing()) return absl::FailedPreconditionError("EndCapture without BeginCapture");
    cudaGraph_t captured = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(capture_stream_.get(), &captured);
    const cuda::UniqueGraph graph(captured);
    absl::Status failure = std::exchange(capture_, Capture{}).error;
    if (ended != cudaSuccess) {
      cudaGetLastError();  // a failed capture is not the next op's failure
      if (failure.ok()) failure = cuda::CudaStatus(ended, "cudaStreamEndCapture");
    }
    PULSE_RETURN_IF_ERROR(failure);
    PULSE_ASSIGN_OR_RETURN(cuda::UniqueGraphExec exec, cuda::InstantiateGraph(graph.get()));
    return std::make_unique<CudaStepGraph>(this, std::move(exec), scratch_epoch_);
  }

  absl::Status LaunchGraph(const StepGraph& graph) override {
    PULSE_ASSIGN_OR_RETURN(const CudaStepGraph* own, OwnEvent<const CudaStepGraph>(graph));
    absl::MutexLock lock(&mu_);
    if (Capturing()) return absl::FailedPreconditionError("LaunchGraph inside a graph capture");
    if (own->scratch_epoch != scratch_epoch_) {
      return absl::FailedPreconditionError(
          "the graph reads scratch memory that has moved since it was captured");
    }
    PULSE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(own->exec.get(), stream_));
    return absl::OkStatus();
  }

  void Embed(const MatrixView& table, int64_t first_row, const int32_t* tokens, int64_t count,
             float* out) override {
    absl::MutexLock lock(&mu_);
    if (!CheckBf16(table, "Embed")) return;
    Record(cuda::LaunchEmbed(table.data, table.rows, table.cols, first_row, tokens, count, out,
                             stream()),
           "Embed");
  }

  void Gemm(const void* x, int64_t m, const MatrixView& w, const float* bias, float* y) override {
    absl::MutexLock lock(&mu_);
    if (!CheckBf16(w, "Gemm")) return;
    const absl::Status status = gemm_->Run(x, m, w.data, w.rows, w.cols, bias, y, stream());
    RecordStatus(status);
  }

  void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t cols, float eps,
               void* y) override {
    absl::MutexLock lock(&mu_);
    Record(cuda::LaunchRmsNorm(x, weight, rows, cols, eps, y, stream()), "RmsNorm");
  }

  void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows, int64_t cols,
                  float eps, void* y) override {
    absl::MutexLock lock(&mu_);
    Record(cuda::LaunchAddRmsNorm(residual, x, weight, rows, cols, eps, y, stream()), "AddRmsNorm");
  }

  void Rope(float* x, int64_t rows, int64_t row_stride, int32_t num_heads, int32_t head_dim,
            const int32_t* positions, const float* inv_freq) override {
    absl::MutexLock lock(&mu_);
    Record(
        cuda::LaunchRope(x, rows, row_stride, num_heads, head_dim, positions, inv_freq, stream()),
        "Rope");
  }

  void SwiGlu(const float* gate_up, int64_t m, int64_t inter, void* out) override {
    absl::MutexLock lock(&mu_);
    Record(cuda::LaunchSwiGlu(gate_up, m, inter, out, stream()), "SwiGlu");
  }

  void AppendKv(const float* k, const float* v, int64_t row_stride,
                const PagedKvBatch& kv) override {
    absl::MutexLock lock(&mu_);
    Record(cuda::LaunchAppendKv(k, v, row_stride, kv, stream()), "AppendKv");
  }

  void RopeAppendKv(float* qkv, int64_t rows, int64_t row_stride, int32_t num_heads,
                    const int32_t* positions, const float* inv_freq,
                    const PagedKvBatch& kv) override {
    absl::MutexLock lock(&mu_);
    if (rows != kv.num_rows) {
      RecordStatus(absl::InvalidArgumentError(absl::StrFormat(
          "CUDA backend: RopeAppendKv of %d rows for a batch of %d", rows, kv.num_rows)));
      return;
    }
    Record(cuda::LaunchRopeAppendKv(qkv, row_stride, num_heads, positions, inv_freq, kv, stream()),
           "RopeAppendKv");
  }

  void Attention(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvBatch& kv,
                 float scale, void* out) override {
    absl::MutexLock lock(&mu_);
    if (kv.max_q_len > 1) {
      Record(cuda::LaunchPrefillAttention(q, q_stride, num_heads, kv, scale, out, stream()),
             "Attention (prefill)");
      return;
    }
    const int32_t splits = cuda::DecodeAttentionSplits(
        kv, num_heads,
        int64_t{sm_count_} *
            (kv.layout.head_dim == 64 ? decode_resident_64_ : decode_resident_128_),
        int64_t{sm_count_} * decode_blocks_per_sm_);
    const int64_t floats = cuda::DecodeAttentionScratchFloats(kv, num_heads, splits);
    if (!Grow(attention_scratch_, static_cast<size_t>(floats) * sizeof(float))) return;
    Record(cuda::LaunchDecodeAttention(q, q_stride, num_heads, kv, scale, splits,
                                       attention_scratch_.as<float>(), out, stream()),
           "Attention (decode)");
  }

  void GatherRows(const void* x, int64_t cols, const int32_t* rows, int64_t count,
                  void* out) override {
    absl::MutexLock lock(&mu_);
    Record(cuda::LaunchGatherRows(x, cols, rows, count, out, stream()), "GatherRows");
  }

  void SummarizeBlocks(const void* blocks, const PagedKvLayout& layout,
                       const BlockEstimator& estimator, const int32_t* block_ids,
                       const int32_t* summary_ids, int32_t count, void* summaries) override {
    absl::MutexLock lock(&mu_);
    if (!CheckSummaries(layout, estimator, layout.num_kv_heads, count, "SummarizeBlocks")) return;
    Record(cuda::LaunchSummarizeBlocks(blocks, layout, estimator, block_ids, summary_ids, count,
                                       summaries, stream()),
           "SummarizeBlocks");
  }
  void ScoreBlocks(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvLayout& layout,
                   const BlockEstimator& estimator, const void* summaries,
                   const int32_t* summary_ids, const int32_t* query_rows, int32_t count,
                   float* bounds) override {
    absl::MutexLock lock(&mu_);
    if (!CheckSummaries(layout, estimator, num_heads, count, "ScoreBlocks")) return;
    Record(cuda::LaunchScoreBlocks(q, q_stride, num_heads, layout, estimator, summaries,
                                   summary_ids, query_rows, count, bounds, stream()),
           "ScoreBlocks");
  }

  void AggregateScores(const float* bounds, int32_t num_heads, int64_t bound_stride,
                       const ScoreSegment* segments, int32_t num_segments, int32_t max_sets,
                       float* scores) override {
    absl::MutexLock lock(&mu_);
    if (num_heads < 1 || num_heads > cuda::kAggregateMaxHeads || max_sets < 1 || max_sets > 65535 ||
        num_segments < 0) {
      RecordStatus(absl::InvalidArgumentError(absl::StrFormat(
          "CUDA backend: AggregateScores of %d heads (at most %d), %d segments of at most %d sets",
          num_heads, cuda::kAggregateMaxHeads, num_segments, max_sets)));
      return;
    }
    const int64_t doubles = cuda::AggregateScoresScratchDoubles(num_heads, num_segments);
    if (!Grow(aggregate_scratch_, static_cast<size_t>(doubles) * sizeof(double))) return;
    Record(cuda::LaunchAggregateScores(bounds, num_heads, bound_stride, segments, num_segments,
                                       max_sets, aggregate_scratch_.as<double>(), scores, stream()),
           "AggregateScores");
  }

  void DrawSyntheticScores(const int32_t* summary_ids, const ScoreSegment* segments,
                           int32_t num_segments, int32_t max_sets, const int32_t* step,
                           const SyntheticPicks& picks, int32_t layer, float* scores) override {
    absl::MutexLock lock(&mu_);
    if (max_sets < 1 || max_sets > 65535 || num_segments < 0 || picks.period_q < 1024) {
      RecordStatus(absl::InvalidArgumentError(absl::StrFormat(
          "CUDA backend: DrawSyntheticScores of %d segments of at most %d sets, period %d / 1024",
          num_segments, max_sets, picks.period_q)));
      return;
    }
    Record(cuda::LaunchDrawSyntheticScores(summary_ids, segments, num_segments, max_sets, step,
                                           picks, layer, scores, stream()),
           "DrawSyntheticScores");
  }

  void SelectTopBlocks(const float* scores, const ScoreSegment* segments, int32_t num_segments,
                       int32_t max_sets, int32_t* picked) override {
    absl::MutexLock lock(&mu_);
    Record(cuda::LaunchSelectTopBlocks(scores, segments, num_segments, max_sets, picked, stream()),
           "SelectTopBlocks");
  }

  void BuildSparseTables(const SparseTableBuild& build) override {
    absl::MutexLock lock(&mu_);
    const int64_t bytes = cuda::BuildSparseTablesScratchBytes(build);
    if (bytes > 0 && !Grow(table_scratch_, static_cast<size_t>(bytes))) return;
    Record(cuda::LaunchBuildSparseTables(build, table_scratch_.data(), stream()),
           "BuildSparseTables");
  }

  void ForgetSlots(const SlotDirectoryView& directory, const int32_t* blocks,
                   int32_t count) override {
    absl::MutexLock lock(&mu_);
    Record(cuda::LaunchForgetSlots(directory, blocks, count, stream()), "ForgetSlots");
  }

  void AdoptFreeSlots(const SlotLayer* layers, int32_t num_layers, int32_t max_sets,
                      int32_t max_slots, const WriteBackEntry* entries, int32_t count,
                      const PagedKvLayout& layout) override {
    absl::MutexLock lock(&mu_);
    Record(cuda::LaunchAdoptFreeSlots(layers, num_layers, max_sets, max_slots, entries, count,
                                      layout, stream()),
           "AdoptFreeSlots");
  }

  void SampleTokens(const float* logits, int64_t rows, int64_t vocab, const TokenSampling* params,
                    const int32_t* history, int32_t* tokens) override {
    absl::MutexLock lock(&mu_);
    const int64_t words = cuda::SampleTokensScratchWords(rows, vocab);
    if (!Grow(sampling_scratch_, static_cast<size_t>(words) * sizeof(uint32_t))) return;
    Record(cuda::LaunchSampleTokens(logits, rows, vocab, params, history,
                                    sampling_scratch_.as<uint32_t>(), tokens, stream()),
           "SampleTokens");
  }

 protected:
  void Free(void* data, size_t bytes) override {
    cudaSetDevice(device_);
    cudaFree(data);
    ReleaseBytes(std::max(bytes, kMinAllocation));
  }

  void FreeHost(void* data, size_t bytes) override {
    cudaFreeHost(data);
    absl::MutexLock lock(&memory_mu_);
    pinned_bytes_ -= std::max(bytes, kMinAllocation);
  }

 private:
  explicit CudaBackend(const CudaBackendOptions& options)
      : device_(options.device),
        memory_limit_(options.memory_limit_bytes),
        copy_gather_blocks_(options.copy_gather_blocks),
        decode_blocks_per_sm_(options.decode_blocks_per_sm),
        gemm_tune_max_rows_(options.gemm_tune_max_rows),
        copy_fault_(options.copy_fault) {}

  absl::Status Init() {
    const int32_t count = CudaDeviceCount();
    if (count == 0) return absl::UnimplementedError("CUDA backend: no CUDA device is present");
    if (device_ < 0 || device_ >= count) {
      return absl::InvalidArgumentError(
          absl::StrFormat("CUDA backend: device %d of %d", device_, count));
    }
    if (decode_blocks_per_sm_ < 1 || decode_blocks_per_sm_ > 64) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "CUDA backend: decode_blocks_per_sm must be in [1, 64], got %d", decode_blocks_per_sm_));
    }
    if (copy_gather_blocks_ < 1 || copy_gather_blocks_ > kMaxGatherBlocks) {
      return absl::InvalidArgumentError(
          absl::StrFormat("CUDA backend: copy_gather_blocks must be in [1, %d], got %d",
                          kMaxGatherBlocks, copy_gather_blocks_));
    }
    PULSE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    PULSE_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
    int major = 0;
    PULSE_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    if (major < 8) {
      return absl::UnimplementedError(absl::StrFormat(
          "CUDA backend: device %d has compute capability %d.x; bf16 tensor cores need 8.0",
          device_, major));
    }
    PULSE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PULSE_ASSIGN_OR_RETURN(gemm_workspace_, Allocate(kGemmWorkspaceBytes));
    PULSE_ASSIGN_OR_RETURN(
        cuda::LtGemm gemm,
        cuda::LtGemm::Create(gemm_workspace_.data(), kGemmWorkspaceBytes, gemm_tune_max_rows_));
    gemm_ = std::make_unique<cuda::LtGemm>(std::move(gemm));
    PULSE_ASSIGN_OR_RETURN(copy_engine_, cuda::CopyEngine::Create(copy_gather_blocks_));
    PULSE_ASSIGN_OR_RETURN(compute_marker_, cuda::CreateEvent(cudaEventDisableTiming));
    PULSE_ASSIGN_OR_RETURN(decode_resident_64_, cuda::DecodeAttentionBlocksPerSm(64));
    PULSE_ASSIGN_OR_RETURN(decode_resident_128_, cuda::DecodeAttentionBlocksPerSm(128));
    return absl::OkStatus();
  }

  void ReleaseBytes(size_t size) {
    absl::MutexLock lock(&memory_mu_);
    live_bytes_ -= size;
  }

  // Whether the calling thread is capturing a graph.
  bool Capturing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return capture_.active && capture_.thread == std::this_thread::get_id();
  }
  // Where the calling thread's ops go.
  cudaStream_t stream() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Capturing() ? capture_stream_.get() : stream_;
  }

  // Keeps the first failure of an op: the capture's while capturing, else the next sync
  // point's.
  void RecordStatus(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status& first = Capturing() ? capture_.error : error_;
    if (!status.ok() && first.ok()) first = status;
  }
  void Record(cudaError_t error, std::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error != cudaSuccess) RecordStatus(cuda::CudaStatus(error, what));
  }

  // Whether the block-summary ops can run `num_heads` query heads over a bf16 cache of `layout`
  // for `count` blocks under `estimator`; false (recorded) when they cannot.
  bool CheckSummaries(const PagedKvLayout& layout, const BlockEstimator& estimator,
                      int32_t num_heads, int32_t count, std::string_view op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status status = ValidateEstimator(estimator, layout);
    if (!status.ok()) {
      status =
          absl::InvalidArgumentError(absl::StrFormat("CUDA backend: %s: %s", op, status.message()));
    } else if (layout.type != DType::kBF16) {
      status = absl::UnimplementedError(
          absl::StrFormat("CUDA backend: %s of a %s KV cache", op, DTypeName(layout.type)));
    } else if (layout.block_tokens < 1 || layout.num_kv_heads < 1 || layout.head_dim < 1 ||
               num_heads < 1 || num_heads % layout.num_kv_heads != 0 || count < 0) {
      status = absl::InvalidArgumentError(absl::StrFormat(
          "CUDA backend: %s of %d blocks of %d tokens x %d KV heads x %d dims, %d query heads", op,
          count, layout.block_tokens, layout.num_kv_heads, layout.head_dim, num_heads));
    }
    RecordStatus(status);
    return status.ok();
  }

  bool CheckBf16(const MatrixView& w, std::string_view op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (w.type == DType::kBF16) return true;
    RecordStatus(absl::UnimplementedError(
        absl::StrFormat("CUDA backend: %s of a %s matrix", op, DTypeName(w.type))));
    return false;
  }

  // Makes `scratch` hold `bytes`; false (recorded) when it cannot.
  bool Grow(DeviceBuffer& scratch, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (scratch.bytes() >= bytes) return true;
    if (Capturing()) {
      RecordStatus(absl::FailedPreconditionError(
          "a captured op needs more scratch memory: run its sizes once uncaptured first"));
      return false;
    }
    // The old scratch may still be used by enqueued work: free it only after the stream drains.
    Record(cudaStreamSynchronize(stream_), "growing scratch memory");
    absl::StatusOr<DeviceBuffer> grown = Allocate(std::max(bytes, 2 * scratch.bytes()));
    if (!grown.ok()) {
      RecordStatus(grown.status());
      return false;
    }
    scratch = *std::move(grown);
    ++scratch_epoch_;  // graphs captured before read the old scratch
    return true;
  }

  // CudaBackendOptions::copy_fault's verdict on the next copy enqueued outside a capture.
  absl::Status InjectedFault(std::string_view op) {
    if (!copy_fault_) return absl::OkStatus();
    const int64_t copy = copies_.fetch_add(1, std::memory_order_relaxed);
    if (!copy_fault_(copy)) return absl::OkStatus();
    return absl::InternalError(
        absl::StrFormat("CUDA backend: %s: copy %d failed (an injected fault)", op, copy));
  }

  // Enqueues what `launch` launches on the copy stream (a kernel over a list the device built)
  // after the compute enqueued so far, and arms `done` with its end.
  absl::Status EnqueueListCopy(CopyEvent& done, std::string_view op,
                               absl::FunctionRef<cudaError_t(cudaStream_t)> launch) {
    PULSE_ASSIGN_OR_RETURN(CudaCopyEvent * event, OwnEvent<CudaCopyEvent>(done));
    {
      absl::MutexLock lock(&mu_);
      if (Capturing()) return CaptureCopy(*event, launch);
      PULSE_RETURN_IF_ERROR(InjectedFault(op));
      PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_marker_.get(), stream_));
    }
    PULSE_RETURN_IF_ERROR(
        copy_engine_->EnqueueLaunch(compute_marker_.get(), event->event.get(), op, launch));
    event->armed = true;
    return absl::OkStatus();
  }

  // Inside this thread's capture: a branch of the graph on the copy capture stream that starts
  // after the compute captured so far, runs what `launch` launches (when not null: a kernel over
  // a list the device built; the copy engine's own stream and staging stay out of graphs), then
  // records `done` as an external event node (timed after a replay) and its join.
  absl::Status CaptureCopy(CudaCopyEvent& done,
                           std::optional<absl::FunctionRef<cudaError_t(cudaStream_t)>> launch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(capture_fork_.get(), capture_stream_.get()));
    PULSE_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(capture_copy_stream_.get(), capture_fork_.get(), 0));
    if (launch.has_value()) {
      PULSE_CUDA_RETURN_IF_ERROR((*launch)(capture_copy_stream_.get()));
    }
    PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(
        done.event.get(), capture_copy_stream_.get(), cudaEventRecordExternal));
    if (done.join == nullptr) {
      PULSE_ASSIGN_OR_RETURN(done.join, cuda::CreateEvent(cudaEventDisableTiming));
    }
    PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(done.join.get(), capture_copy_stream_.get()));
    done.join_capture = capture_count_;
    done.armed = true;
    return absl::OkStatus();
  }

  absl::Status SynchronizeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Record(cudaStreamSynchronize(stream_), "Synchronize");
    return std::exchange(error_, absl::OkStatus());
  }

  const int32_t device_;
  const size_t memory_limit_;
  const int32_t copy_gather_blocks_;
  const int32_t decode_blocks_per_sm_;
  const int32_t gemm_tune_max_rows_;
  const std::function<bool(int64_t)> copy_fault_;
  std::atomic<int64_t> copies_ = 0;  // copies enqueued outside captures, for copy_fault_
  ThreadPool host_pool_;             // converts weights to bf16 before upload
  int sm_count_ = 0;
  int32_t decode_resident_64_ = 1;  // decode attention blocks an SM holds at once, by head_dim
  int32_t decode_resident_128_ = 1;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer gemm_workspace_;
  std::unique_ptr<cuda::LtGemm> gemm_;
  std::unique_ptr<cuda::CopyEngine> copy_engine_;
  cuda::UniqueEvent compute_marker_;  // where a plan with after_compute starts on the copy stream

  mutable absl::Mutex memory_mu_;
  size_t live_bytes_ ABSL_GUARDED_BY(memory_mu_) = 0;
  size_t pinned_bytes_ ABSL_GUARDED_BY(memory_mu_) = 0;

  struct Capture {
    bool active = false;
    std::thread::id thread;
    absl::Status error;  // the first failure of a captured op
  };

  absl::Mutex mu_;
  DeviceBuffer attention_scratch_ ABSL_GUARDED_BY(mu_);
  DeviceBuffer sampling_scratch_ ABSL_GUARDED_BY(mu_);
  DeviceBuffer aggregate_scratch_ ABSL_GUARDED_BY(mu_);
  DeviceBuffer table_scratch_ ABSL_GUARDED_BY(mu_);  // BuildSparseTables' pending misses
  uint64_t scratch_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped when a scratch buffer moves
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  Capture capture_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> host_waits_ = 0;
  cuda::UniqueStream capture_stream_ ABSL_GUARDED_BY(mu_);  // made by the first capture
  // A capture's copies branch off onto this stream (CaptureCopy), forked by capture_fork_; its
  // priority, kept by the graph's nodes, lets a recall's thread blocks take SMs as the other
  // micro-batch's kernels free them.
  cuda::UniqueStream capture_copy_stream_ ABSL_GUARDED_BY(mu_);
  cuda::UniqueEvent capture_fork_ ABSL_GUARDED_BY(mu_);
  uint64_t capture_count_ ABSL_GUARDED_BY(mu_) = 0;  // captures begun
};

}  // namespace

absl::StatusOr<std::shared_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  return CudaBackend::Create(options);
}

bool CudaBackendCompiled() { return true; }

int32_t CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace pulse
