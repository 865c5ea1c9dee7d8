// A Backend for the test tools that runs every op on a primary backend and, beside it, the
// selection chain (ScoreBlocks, AggregateScores, SelectTopBlocks) on a reference backend over host
// copies of the primary's inputs, and counts how many of the primary's picks the reference picks
// too: how often the CUDA backend's selection is the CPU backend's on the same inputs.
//
// Every shadowed op waits for the primary, so the decorator has no graph support: a runner over it
// runs its decode steps op by op. Buffers and events are the primary's. Use it from one thread at
// a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/backend/backend.h"

namespace pulse {

// A differing pick's relative gap |a - b| / max(|a|, |b|) between its reference score and the
// reference's lowest-ranked pick's score falls in the first bucket whose bound it is below, or in
// the last (NaN included).
inline constexpr std::array<double, 3> kPickGapBounds = {1e-6, 1e-4, 1e-2};
inline constexpr std::array<std::string_view, 4> kPickGapBucketNames = {"<1e-6", "<1e-4", "<1e-2",
                                                                        ">=1e-2"};
static_assert(kPickGapBucketNames.size() == kPickGapBounds.size() + 1);

struct PickCrossCheckStats {
  int64_t selections = 0;  // (segment, set) selections compared
  int64_t picks = 0;       // the primary's picks in them
  int64_t same = 0;        // of `picks`, those the reference picked too
  std::array<int64_t, kPickGapBucketNames.size()> differing = {};  // picks - same, by gap bucket
  // The first failure: of a copy from the primary, of a reference op, or a primary op's failure
  // that a copy reported (also returned by the decorator's next Synchronize or CopyToHost).
  absl::Status error;

  // Adds `other`'s counts; keeps the first error.
  void Add(const PickCrossCheckStats& other);
};

class PickCrossCheckBackend : public Backend {
 public:
  // `reference` runs the shadowed ops on host memory: a CPU backend.
  PickCrossCheckBackend(std::shared_ptr<Backend> primary, std::shared_ptr<Backend> reference);

  // The stats since the last call (or construction); starts them again.
  PickCrossCheckStats TakeStats();

  std::string_view name() const override { return primary_->name(); }
  DType activation_type() const override { return primary_->activation_type(); }
  DType kv_type() const override { return primary_->kv_type(); }
  absl::Status CheckAttention(int32_t num_heads, const PagedKvLayout& layout) const override {
    return primary_->CheckAttention(num_heads, layout);
  }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override { return primary_->Allocate(bytes); }
  size_t AvailableBytes() const override { return primary_->AvailableBytes(); }
  absl::StatusOr<Weight> UploadWeight(std::span<const float> values, int64_t rows, int64_t cols,
                                      DType type) override {
    return primary_->UploadWeight(values, rows, cols, type);
  }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    primary_->CopyToDevice(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  absl::Status Synchronize() override;

  absl::StatusOr<HostBuffer> AllocateHost(size_t bytes) override {
    return primary_->AllocateHost(bytes);
  }
  absl::StatusOr<std::unique_ptr<CopyEvent>> CreateCopyEvent() override {
    return primary_->CreateCopyEvent();
  }
  absl::Status EnqueueCopy(const CopyPlan& plan, CopyEvent& done) override {
    return primary_->EnqueueCopy(plan, done);
  }
  absl::Status WaitForCopy(const CopyEvent& event) override { return primary_->WaitForCopy(event); }
  absl::StatusOr<bool> CopyDone(const CopyEvent& event) override {
    return primary_->CopyDone(event);
  }
  absl::Status SynchronizeCopy(const CopyEvent& event) override {
    return primary_->SynchronizeCopy(event);
  }
  absl::StatusOr<double> CopySeconds(const CopyEvent& start, const CopyEvent& end) override {
    return primary_->CopySeconds(start, end);
  }

  // The shadowed ops wait for the primary, which no capture can.
  bool SupportsGraphs() const override { return false; }

  void Embed(const MatrixView& table, int64_t first_row, const int32_t* tokens, int64_t count,
             float* out) override {
    primary_->Embed(table, first_row, tokens, count, out);
  }
  void Gemm(const void* x, int64_t m, const MatrixView& w, const float* bias, float* y) override {
    primary_->Gemm(x, m, w, bias, y);
  }
  void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t cols, float eps,
               void* y) override {
    primary_->RmsNorm(x, weight, rows, cols, eps, y);
  }
  void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows, int64_t cols,
                  float eps, void* y) override {
    primary_->AddRmsNorm(residual, x, weight, rows, cols, eps, y);
  }
  void Rope(float* x, int64_t rows, int64_t row_stride, int32_t num_heads, int32_t head_dim,
            const int32_t* positions, const float* inv_freq) override {
    primary_->Rope(x, rows, row_stride, num_heads, head_dim, positions, inv_freq);
  }
  void SwiGlu(const float* gate_up, int64_t m, int64_t inter, void* out) override {
    primary_->SwiGlu(gate_up, m, inter, out);
  }
  void AppendKv(const float* k, const float* v, int64_t row_stride,
                const PagedKvBatch& kv) override {
    primary_->AppendKv(k, v, row_stride, kv);
  }
  void RopeAppendKv(float* qkv, int64_t rows, int64_t row_stride, int32_t num_heads,
                    const int32_t* positions, const float* inv_freq,
                    const PagedKvBatch& kv) override {
    primary_->RopeAppendKv(qkv, rows, row_stride, num_heads, positions, inv_freq, kv);
  }
  void Attention(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvBatch& kv,
                 float scale, void* out) override {
    primary_->Attention(q, q_stride, num_heads, kv, scale, out);
  }
  void GatherRows(const void* x, int64_t cols, const int32_t* rows, int64_t count,
                  void* out) override {
    primary_->GatherRows(x, cols, rows, count, out);
  }
  void SummarizeBlocks(const void* blocks, const PagedKvLayout& layout,
                       const BlockEstimator& estimator, const int32_t* block_ids,
                       const int32_t* summary_ids, int32_t count, void* summaries) override {
    primary_->SummarizeBlocks(blocks, layout, estimator, block_ids, summary_ids, count, summaries);
  }
  void ScoreBlocks(const float* q, int64_t q_stride, int32_t num_heads, const PagedKvLayout& layout,
                   const BlockEstimator& estimator, const void* summaries,
                   const int32_t* summary_ids, const int32_t* query_rows, int32_t count,
                   float* bounds) override;
  void AggregateScores(const float* bounds, int32_t num_heads, int64_t bound_stride,
                       const ScoreSegment* segments, int32_t num_segments, int32_t max_sets,
                       float* scores) override;
  void DrawSyntheticScores(const int32_t* summary_ids, const ScoreSegment* segments,
                           int32_t num_segments, int32_t max_sets, const int32_t* step,
                           const SyntheticPicks& picks, int32_t layer, float* scores) override;
  void SampleTokens(const float* logits, int64_t rows, int64_t vocab, const TokenSampling* params,
                    const int32_t* history, int32_t* tokens) override {
    primary_->SampleTokens(logits, rows, vocab, params, history, tokens);
  }

  void SelectTopBlocks(const float* scores, const ScoreSegment* segments, int32_t num_segments,
                       int32_t max_sets, int32_t* picked) override;
  void BuildSparseTables(const SparseTableBuild& build) override {
    primary_->BuildSparseTables(build);
  }
  absl::Status EnqueueRecall(const RecallList& list, int32_t num_sets, const HostTierView& host,
                             int32_t layer, void* layer_blocks, int32_t first_slot,
                             const PagedKvLayout& layout, CopyEvent& done) override {
    return primary_->EnqueueRecall(list, num_sets, host, layer, layer_blocks, first_slot, layout,
                                   done);
  }
  absl::Status EnqueueWriteBack(const WriteBackEntry* entries, int32_t count,
                                const HostTierView& host, int32_t layer, const void* layer_blocks,
                                const PagedKvLayout& layout, CopyEvent& done) override {
    return primary_->EnqueueWriteBack(entries, count, host, layer, layer_blocks, layout, done);
  }
  void ForgetSlots(const SlotDirectoryView& directory, const int32_t* blocks,
                   int32_t count) override {
    primary_->ForgetSlots(directory, blocks, count);
  }
  void AdoptFreeSlots(const SlotLayer* layers, int32_t num_layers, int32_t max_sets,
                      int32_t max_slots, const WriteBackEntry* entries, int32_t count,
                      const PagedKvLayout& layout) override {
    primary_->AdoptFreeSlots(layers, num_layers, max_sets, max_slots, entries, count, layout);
  }
  int64_t host_waits() const override { return primary_->host_waits(); }

 protected:
  // Allocations are the primary's: their buffers name it as their owner and never come here.
  // These forward all the same.
  void Free(void* data, size_t bytes) override { DeviceBuffer(primary_.get(), data, bytes); }
  void FreeHost(void* data, size_t bytes) override { HostBuffer(primary_.get(), data, bytes); }

 private:
  // Copies `bytes` of the primary's memory at `src` to `dst`, after the ops enqueued so far; a
  // failure is also kept for the decorator's next Synchronize or CopyToHost.
  absl::Status Fetch(void* dst, const void* src, size_t bytes);
  template <typename T>
  absl::StatusOr<std::vector<T>> FetchArray(const T* src, int64_t count);
  absl::StatusOr<std::vector<float>> ReferenceBounds(const float* q, int64_t q_stride,
                                                     int32_t num_heads, const PagedKvLayout& layout,
                                                     const BlockEstimator& estimator,
                                                     const void* summaries,
                                                     const int32_t* summary_ids,
                                                     const int32_t* query_rows, int32_t count);
  absl::StatusOr<std::vector<float>> ReferenceScores(const std::vector<float>& bounds,
                                                     int32_t num_heads, int64_t bound_stride,
                                                     const ScoreSegment* segments,
                                                     int32_t num_segments, int32_t max_sets);
  absl::Status ComparePicks(const std::vector<float>& scores, const ScoreSegment* segments,
                            int32_t num_segments, int32_t max_sets, const int32_t* picked);
  void Fail(absl::Status status);

  std::shared_ptr<Backend> primary_;
  std::shared_ptr<Backend> reference_;
  // The reference's results of the step's layer so far, by the primary's output pointer.
  absl::flat_hash_map<const float*, std::vector<float>> bounds_;
  absl::flat_hash_map<const float*, std::vector<float>> scores_;
  absl::Status pending_;  // a primary failure that Fetch took from the primary's caller
  PickCrossCheckStats stats_;
};

}  // namespace pulse
