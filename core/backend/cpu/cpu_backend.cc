#include "core/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/backend/bf16.h"
#include "core/backend/cpu/copy_thread.h"
#include "core/backend/cpu/kernels.h"
#include "core/backend/reference/block_summary.h"
#include "core/backend/reference/fp8_kv_block.h"
#include "core/backend/reference/sample_row.h"
#include "core/backend/reference/sparse_selection.h"
#include "core/base/thread_pool.h"

namespace pulse {
namespace {

constexpr size_t kAlignment = 64;
constexpr int32_t kMaxThreads = 1024;

// The bytes an allocation of `bytes` takes: aligned_alloc needs a multiple of the alignment, and a
// zero-byte request still gets a distinct, non-null block.
size_t AllocationBytes(size_t bytes) {
  return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

// How far a step's score segments reach into the candidates, the scores and the picks, for the
// spans the reference ops check; InvalidArgument (naming `op`) for a segment of more than
// `max_sets` sets.
struct SegmentsReach {
  int64_t candidates = 0;
  int64_t scores = 0;
  int64_t picks = 0;
};
absl::StatusOr<SegmentsReach> ReachOf(const char* op, const ScoreSegment* segments,
                                      int32_t num_segments, int32_t max_sets) {
  SegmentsReach reach;
  for (const ScoreSegment& segment : std::span(segments, static_cast<size_t>(num_segments))) {
    if (segment.num_sets > max_sets) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: a segment of %d sets, at most %d", op, segment.num_sets, max_sets));
    }
    reach.candidates = std::max(reach.candidates, int64_t{segment.first} + segment.count);
    reach.scores =
        std::max(reach.scores, segment.scores_first + int64_t{segment.num_sets} * segment.count);
    reach.picks =
        std::max(reach.picks, segment.picks_first + int64_t{segment.num_sets} * segment.picks);
  }
  return reach;
}

class CpuCopyEvent final : public CopyEvent {
 public:
  explicit CpuCopyEvent(const Backend* backend) : CopyEvent(backend) {}

  std::shared_ptr<const cpu::CopyThread::Completion> completion;  // null: never armed
};

// A block to decode from the fp8 host tier (`src`, HostBlockBytes) into the device's form
// (`dst`): the keys and values of KV heads [first_head, first_head + heads).
struct Fp8Decode {
  const void* src;
  void* dst;
  int32_t first_head;
  int32_t heads;
};

// The copy thread's work for `decodes` of blocks of `layout`.
std::function<void()> DecodeFp8(const PagedKvLayout& layout, std::vector<Fp8Decode> decodes) {
  return [layout, decodes = std::move(decodes)] {
    const auto host = static_cast<size_t>(HostBlockBytes(layout, HostCodec::kFp8E4m3));
    const auto block = static_cast<size_t>(layout.block_bytes());
    for (const Fp8Decode& decode : decodes) {
      const std::span src(static_cast<const std::byte*>(decode.src), host);
      const std::span dst(static_cast<std::byte*>(decode.dst), block);
      for (int32_t head = decode.first_head; head < decode.first_head + decode.heads; ++head) {
        DecodeFp8KvPart(layout, src, head, dst);
        DecodeFp8KvPart(layout, src, layout.num_kv_heads + head, dst);
      }
    }
  };
}

// The copy thread's work for `chunks`, whole blocks of `layout` (src) encoded into the fp8 host
// tier (dst).
std::function<void()> EncodeFp8(const PagedKvLayout& layout, std::vector<CopyChunk> chunks) {
  return [layout, chunks = std::move(chunks)] {
    const auto host = static_cast<size_t>(HostBlockBytes(layout, HostCodec::kFp8E4m3));
    for (const CopyChunk& chunk : chunks) {
      EncodeFp8KvBlock(layout, std::span(static_cast<const std::byte*>(chunk.src), chunk.bytes),
                       std::span(static_cast<std::byte*>(chunk.dst), host));
    }
  };
}

// Bytes allocated against a limit (0: none).
struct Budget {
  size_t limit = 0;
  size_t live = 0;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : kernels_(cpu::CpuKernelsFor(options.kernel_level)),
        pool_(options.threads),
        device_{.limit = options.memory_limit_bytes},
        host_{.limit = options.host_memory_limit_bytes},
        slot_fault_(options.slot_fault),
        copy_thread_(options.copy_delay, options.copy_fault) {}

  std::string_view name() const override { return "cpu"; }
  DType activation_type() const override { return DType::kF32; }
  DType kv_type() const override { return DType::kF32; }

  absl::Status CheckAttention(int32_t num_heads, const PagedKvLayout& layout) const override {
    if (layout.type != DType::kF32) {
      return absl::UnimplementedError(
          absl::StrFormat("CPU backend: a KV cache of %s, not f32", DTypeName(layout.type)));
    }
    if (layout.num_kv_heads < 1 || num_heads % layout.num_kv_heads != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "CPU backend: %d query heads over %d KV heads", num_heads, layout.num_kv_heads));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    PULSE_ASSIGN_OR_RETURN(void* data, AllocateFrom(device_, bytes, "device"));
    return DeviceBuffer(this, data, bytes);
  }

  size_t AvailableBytes() const override {
    absl::MutexLock lock(&mu_);
    return device_.limit == 0 ? 0 : device_.limit - device_.live;
  }

  absl::StatusOr<Weight> UploadWeight(std::span<const float> values, int64_t rows, int64_t cols,
                                      DType type) override {
    PULSE_ASSIGN_OR_RETURN(const size_t bytes, WeightBytes(values, rows, cols, type));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(bytes));
    const int64_t count = rows * cols;
    switch (type) {
      case DType::kF32:
        if (count != 0) std::memcpy(buffer.data(), values.data(), values.size_bytes());
        break;
      case DType::kQ8_0:
      case DType::kQ4_0:
      case DType::kQ4_1:
      case DType::kQ4_K:
      case DType::kQ6_K:
        break;  // WeightBytes refused them
      case DType::kBF16: {
        uint16_t* out = buffer.as<uint16_t>();
        pool_.ParallelFor(count, 1 << 16, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[i] = F32ToBf16(values[i]);
        });
        break;
      }
    }
    return Weight{std::move(buffer), type, rows, cols};
  }

  absl::StatusOr<Weight> UploadBlocks(std::span<const std::byte> blocks, int64_t rows, int64_t cols,
                                      DType type) override {
    PULSE_RETURN_IF_ERROR(CheckWeightBlocks(blocks, rows, cols, type));
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(blocks.size()));
    if (!blocks.empty()) std::memcpy(buffer.data(), blocks.data(), blocks.size());
    return Weight{std::move(buffer), type, rows, cols};
  }

  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
    return Synchronize();
  }
  absl::Status Synchronize() override {
    host_waits_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    return std::exchange(error_, absl::OkStatus());
  }
  int64_t host_waits() const override { return host_waits_.load(std::memory_order_relaxed); }

  absl::StatusOr<HostBuffer> AllocateHost(size_t bytes) override {
    PULSE_ASSIGN_OR_RETURN(void* data, AllocateFrom(host_, bytes, "host"));
    return HostBuffer(this, data, bytes);
  }

  absl::StatusOr<std::unique_ptr<CopyEvent>> CreateCopyEvent() override {
    return std::make_unique<CpuCopyEvent>(this);
  }

  absl::Status EnqueueCopy(const CopyPlan& plan, CopyEvent& done) override {
    PULSE_ASSIGN_OR_RETURN(CpuCopyEvent * event, OwnEvent<CpuCopyEvent>(done));
    PULSE_RETURN_IF_ERROR(ValidateCopyPlan(plan));
    if (plan.codec == HostCodec::kRaw) {
      event->completion = copy_thread_.Enqueue(plan.chunks);
      return absl::OkStatus();
    }
    if (plan.direction == CopyDirection::kDeviceToHost) {
      event->completion = copy_thread_.EnqueueMove(
          EncodeFp8(plan.layout, {plan.chunks.begin(), plan.chunks.end()}));
      return absl::OkStatus();
    }
    std::vector<Fp8Decode> decodes;
    for (const CopyChunk& chunk : plan.chunks) {
      decodes.push_back({chunk.src, chunk.dst, 0, plan.layout.num_kv_heads});
    }
    event->completion = copy_thread_.EnqueueMove(DecodeFp8(plan.layout, std::move(decodes)));
    return absl::OkStatus();
  }

  // Compute runs on the calling thread: waiting for the copy thread is all it takes (and the
  // backend's ordinary way of running a step, so not counted as a host wait).
  absl::Status WaitForCopy(const CopyEvent& event) override { return WaitForCopyThread(event); }

  absl::StatusOr<bool> CopyDone(const CopyEvent& event) override {
    PULSE_ASSIGN_OR_RETURN(const CpuCopyEvent* own, OwnEvent<const CpuCopyEvent>(event));
    return own->completion == nullptr || copy_thread_.CompletedAt(*own->completion).has_value();
  }

  absl::Status SynchronizeCopy(const CopyEvent& event) override {
    host_waits_.fetch_add(1, std::memory_order_relaxed);
    return WaitForCopyThread(event);
  }

  absl::StatusOr<double> CopySeconds(const CopyEvent& start, const CopyEvent& end) override {
    PULSE_ASSIGN_OR_RETURN(const CpuCopyEvent* from, OwnEvent<const CpuCopyEvent>(start));
    PULSE_ASSIGN_OR_RETURN(const CpuCopyEvent* to, OwnEvent<const CpuCopyEvent>(end));
    if (from->completion == nullptr || to->completion == nullptr) {
      return absl::FailedPreconditionError("CopySeconds: an event was never armed");
    }
    const auto from_time = copy_thread_.CompletedAt(*from->completion);
    const auto to_time = copy_thread_.CompletedAt(*to->completion);
    if (!from_time.has_value() || !to_time.has_value()) {
      return absl::FailedPreconditionError("CopySeconds: an event has not completed");
    }
    return std::chrono::duration<double>(*to_time - *from_time).count();
  }

  void Embed(const MatrixView& table, int64_t first_row, const int32_t* tokens, int64_t count,
             float* out) override {
    kernels_.embed(pool_, table, first_row, tokens, count, out);
  }
  // Activations are fp32 here: the void* of the interface are float*.
  void Gemm(const void* x, int64_t m, const MatrixView& w, const float* bias, float* y) override {
    kernels_.gemm(pool_, static_cast<const float*>(x), m, w, bias, y);
  }
  void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t cols, float eps,
               void* y) override {
    kernels_.rms_norm(pool_, x, weight, rows, cols, eps, static_cast<float*>(y));
  }
  void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows, int64_t cols,
                  float eps, void* y) override {
    kernels_.add_rms_norm(pool_, residual, x, weight, rows, cols, eps, static_cast<float*>(y));
  }
  void Rope(float* x, int64_t rows, int64_t row_stride, int32_t num_heads, int32_t head_dim,
            const int32_t* positions, const float* inv_freq) override {
    kernels_.rope(pool_, x, rows, row_stride, num_heads, head_dim, positions, inv_freq);
  }
  void SwiGlu(const float* gate_up, int64_t m, int64_t inter, void* out) override {
    kernels_.swiglu(pool_, gate_up, m, inter, static_cast<float*>(out));
  }
  void AppendKv(const float* k, const float* v, int64_t row_stride,
                const PagedKvBatch& kv) override {
    kernels_.append_kv(k, v, row_stride, kv);
  }
  void Attention(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvBatch& kv,
                 float scale, void* out) override {
    kernels_.attention(pool_, q, q_stride, num_heads, kv, scale, static_cast<float*>(out));
  }
  void GatherRows(const void* x, int64_t cols, const int32_t* rows, int64_t count,
                  void* out) override {
    kernels_.gather_rows(static_cast<const float*>(x), cols, rows, count, static_cast<float*>(out));
  }
  void SummarizeBlocks(const void* blocks, const PagedKvLayout& layout,
                       const BlockEstimator& estimator, const int32_t* block_ids,
                       const int32_t* summary_ids, int32_t count, void* summaries) override {
    const auto bytes = static_cast<size_t>(SummaryBytes(layout, estimator));
    const auto* data = static_cast<const float*>(blocks);
    auto* out = static_cast<std::byte*>(summaries);
    for (int32_t i = 0; i < count; ++i) {
      if (block_ids[i] < 0) continue;
      Record(reference::SummarizeBlock(
          layout, estimator,
          std::span<const float>(data + block_ids[i] * layout.block_elems(), layout.block_elems()),
          layout.block_tokens, std::span<std::byte>(out + summary_ids[i] * bytes, bytes)));
    }
  }
  void ScoreBlocks(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvLayout& layout,
                   const BlockEstimator& estimator, const void* summaries,
                   const int32_t* summary_ids, const int32_t* query_rows, int32_t count,
                   float* bounds) override {
    kernels_.score_blocks(pool_, q, q_stride, num_heads, layout, estimator,
                          static_cast<const std::byte*>(summaries), summary_ids, query_rows, count,
                          bounds);
  }
  void AggregateScores(const float* bounds, int32_t num_heads, int64_t bound_stride,
                       const ScoreSegment* segments, int32_t num_segments, int32_t max_sets,
                       float* scores) override {
    const absl::StatusOr<SegmentsReach> reach =
        ReachOf("AggregateScores", segments, num_segments, max_sets);
    if (!reach.ok()) {
      Record(reach.status());
      return;
    }
    Record(reference::AggregateScores(
        std::span(bounds, static_cast<size_t>(num_heads * bound_stride)), num_heads,
        std::span(segments, static_cast<size_t>(num_segments)),
        std::span(scores, static_cast<size_t>(reach->scores))));
  }
  void DrawSyntheticScores(const int32_t* summary_ids, const ScoreSegment* segments,
                           int32_t num_segments, int32_t max_sets, const int32_t* step,
                           const SyntheticPicks& picks, int32_t layer, float* scores) override {
    const absl::StatusOr<SegmentsReach> reach =
        ReachOf("DrawSyntheticScores", segments, num_segments, max_sets);
    if (!reach.ok()) {
      Record(reach.status());
      return;
    }
    Record(reference::DrawSyntheticScores(
        std::span(summary_ids, static_cast<size_t>(reach->candidates)),
        std::span(segments, static_cast<size_t>(num_segments)), *step, picks, layer,
        std::span(scores, static_cast<size_t>(reach->scores))));
  }
  void SampleTokens(const float* logits, int64_t rows, int64_t vocab, const TokenSampling* params,
                    const int32_t* history, int32_t* tokens) override {
    pool_.ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
      reference::SampleScratch scratch;
      for (int64_t r = begin; r < end; ++r) {
        tokens[r] = reference::SampleRow(
            std::span<const float>(logits + r * vocab, vocab), params[r],
            std::span<const int32_t>(history + params[r].history_offset, params[r].history_count),
            scratch);
      }
    });
  }

  void SelectTopBlocks(const float* scores, const ScoreSegment* segments, int32_t num_segments,
                       int32_t max_sets, int32_t* picked) override {
    const absl::StatusOr<SegmentsReach> reach =
        ReachOf("SelectTopBlocks", segments, num_segments, max_sets);
    if (!reach.ok()) {
      Record(reach.status());
      return;
    }
    Record(reference::SelectTopBlocks(std::span(scores, static_cast<size_t>(reach->scores)),
                                      std::span(segments, static_cast<size_t>(num_segments)),
                                      std::span(picked, static_cast<size_t>(reach->picks))));
  }
  void BuildSparseTables(const SparseTableBuild& build) override {
    if (slot_fault_ && build.directory.slot_of_block != nullptr && slot_fault_(table_builds_++)) {
      SparseTableBuild starved = build;
      starved.recalls.capacity = 0;  // no victim for any miss
      Record(reference::BuildSparseTables(starved));
      return;
    }
    Record(reference::BuildSparseTables(build));
  }
  void ForgetSlots(const SlotDirectoryView& directory, const int32_t* blocks,
                   int32_t count) override {
    reference::ForgetSlots(directory, std::span(blocks, static_cast<size_t>(count)));
  }
  void AdoptFreeSlots(const SlotLayer* layers, int32_t num_layers, int32_t /*max_sets*/,
                      int32_t /*max_slots*/, const WriteBackEntry* entries, int32_t count,
                      const PagedKvLayout& layout) override {
    Record(reference::AdoptFreeSlots(std::span(layers, static_cast<size_t>(num_layers)),
                                     std::span(entries, static_cast<size_t>(count)), layout));
  }

  // Compute has run by now (it runs on the calling thread), so the lists are read here and the
  // copy thread moves the chunks they name.
  absl::Status EnqueueRecall(const RecallList& list, int32_t num_sets, const HostTierView& host,
                             int32_t layer, void* layer_blocks, int32_t first_slot,
                             const PagedKvLayout& layout, CopyEvent& done) override {
    PULSE_ASSIGN_OR_RETURN(CpuCopyEvent * event, OwnEvent<CpuCopyEvent>(done));
    const int64_t block_bytes = layout.block_bytes();
    const int64_t host_bytes = HostBlockBytes(layout, host.codec);
    const int64_t fragment = layout.head_elems() * static_cast<int64_t>(DTypeBytes(layout.type));
    const int64_t values = layout.value_offset() * static_cast<int64_t>(DTypeBytes(layout.type));
    std::vector<CopyChunk> chunks;
    std::vector<Fp8Decode> decodes;
    for (int32_t set = 0; set < num_sets; ++set) {
      for (int32_t i = 0; i < list.counts[set]; ++i) {
        const RecallEntry& entry = list.entries[int64_t{set} * list.capacity + i];
        if (entry.host_block < 0 || entry.host_block >= host.num_blocks) {
          return absl::InvalidArgumentError(absl::StrFormat("EnqueueRecall: host block %d of %d",
                                                            entry.host_block, host.num_blocks));
        }
        const char* src = HostTierBlock(host, layer, host_bytes, entry.host_block);
        char* dst = static_cast<char*>(layer_blocks) + (first_slot + entry.slot) * block_bytes;
        if (host.codec == HostCodec::kFp8E4m3) {
          decodes.push_back(num_sets == 1 ? Fp8Decode{src, dst, 0, layout.num_kv_heads}
                                          : Fp8Decode{src, dst, set, 1});
          continue;
        }
        if (num_sets == 1) {
          chunks.push_back({src, dst, static_cast<size_t>(block_bytes)});
          continue;
        }
        for (const int64_t offset : {set * fragment, values + set * fragment}) {
          chunks.push_back({src + offset, dst + offset, static_cast<size_t>(fragment)});
        }
      }
    }
    if (host.codec == HostCodec::kRaw) {
      event->completion = copy_thread_.Enqueue(chunks);
      return absl::OkStatus();
    }
    event->completion = copy_thread_.EnqueueMove(DecodeFp8(layout, std::move(decodes)));
    return absl::OkStatus();
  }
  absl::Status EnqueueWriteBack(const WriteBackEntry* entries, int32_t count,
                                const HostTierView& host, int32_t layer, const void* layer_blocks,
                                const PagedKvLayout& layout, CopyEvent& done) override {
    PULSE_ASSIGN_OR_RETURN(CpuCopyEvent * event, OwnEvent<CpuCopyEvent>(done));
    const int64_t block_bytes = layout.block_bytes();
    const int64_t host_bytes = HostBlockBytes(layout, host.codec);
    std::vector<CopyChunk> chunks;
    for (const WriteBackEntry& entry : std::span(entries, static_cast<size_t>(count))) {
      if (entry.device_block < 0) continue;
      if (entry.host_block < 0 || entry.host_block >= host.num_blocks) {
        return absl::InvalidArgumentError(absl::StrFormat("EnqueueWriteBack: host block %d of %d",
                                                          entry.host_block, host.num_blocks));
      }
      chunks.push_back({static_cast<const char*>(layer_blocks) + entry.device_block * block_bytes,
                        HostTierBlock(host, layer, host_bytes, entry.host_block),
                        static_cast<size_t>(block_bytes)});
    }
    if (host.codec == HostCodec::kRaw) {
      event->completion = copy_thread_.Enqueue(chunks);
      return absl::OkStatus();
    }
    event->completion = copy_thread_.EnqueueMove(EncodeFp8(layout, std::move(chunks)));
    return absl::OkStatus();
  }

 protected:
  void Free(void* data, size_t bytes) override { Release(device_, data, bytes); }
  void FreeHost(void* data, size_t bytes) override { Release(host_, data, bytes); }

 private:
  // Aligned memory of `bytes` counted against `budget`; ResourceExhausted beyond its limit.
  absl::StatusOr<void*> AllocateFrom(Budget& budget, size_t bytes, std::string_view tier) {
    if (bytes > std::numeric_limits<size_t>::max() - kAlignment) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("CPU backend: cannot allocate %u bytes of %s memory", bytes, tier));
    }
    const size_t size = AllocationBytes(bytes);
    {
      absl::MutexLock lock(&mu_);
      if (budget.limit != 0 && size > budget.limit - budget.live) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "CPU backend: cannot allocate %u bytes of %s memory: %u of its %u-byte limit are in "
            "use",
            bytes, tier, budget.live, budget.limit));
      }
      budget.live += size;
    }
    void* data = std::aligned_alloc(kAlignment, size);
    if (data == nullptr) {
      Release(budget, nullptr, bytes);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "CPU backend: out of memory allocating %u bytes of %s memory", bytes, tier));
    }
    return data;
  }

  absl::Status WaitForCopyThread(const CopyEvent& event) {
    PULSE_ASSIGN_OR_RETURN(const CpuCopyEvent* own, OwnEvent<const CpuCopyEvent>(event));
    return own->completion == nullptr ? absl::OkStatus() : copy_thread_.Wait(*own->completion);
  }

  // Keeps the first failure of an op for the next Synchronize or CopyToHost.
  void Record(absl::Status status) {
    if (status.ok()) return;
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(status);
  }

  void Release(Budget& budget, void* data, size_t bytes) {
    std::free(data);
    absl::MutexLock lock(&mu_);
    budget.live -= AllocationBytes(bytes);
  }

  const cpu::CpuKernels& kernels_;
  ThreadPool pool_;
  mutable absl::Mutex mu_;
  Budget device_ ABSL_GUARDED_BY(mu_);
  Budget host_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> host_waits_ = 0;
  std::function<bool(int64_t)> slot_fault_;
  int64_t table_builds_ = 0;     // offloaded layers' table builds, for slot_fault_
  cpu::CopyThread copy_thread_;  // last: it finishes its queue before anything else goes
};

}  // namespace

absl::StatusOr<std::shared_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options) {
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CPU backend: threads must be in [0, %d] (0: hardware cores), got %d",
                        kMaxThreads, options.threads));
  }
  if (options.copy_delay < absl::ZeroDuration() || options.copy_delay == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CPU backend: copy_delay must be finite and >= 0, got %s",
                        absl::FormatDuration(options.copy_delay)));
  }
  if (!cpu::CpuLevelSupported(options.kernel_level)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("CPU backend: this CPU does not run the %s kernels",
                        cpu::CpuLevelName(options.kernel_level)));
  }
  return std::make_shared<CpuBackend>(options);
}

}  // namespace pulse
