// The Llama-family forward pass as per-layer stages over one step's batch (DESIGN.md, "one
// decode step as data"): the step's inputs are uploaded and its tokens embedded; then per layer
// PreAttention (norm, QKV projection, RoPE, KV append), Select (the sparse rows' picks and the
// recall of their misses), Attend, PostAttention (O projection, norm, MLP); then the logits.
// A decode step may run as several micro-batches whose stages interleave so that one
// micro-batch's recall lands while the others compute (docs/design/scheduling.md). A step's
// state is one StepContext per micro-batch and the shared StepOutputs; sparse decode attention
// and offloaded KV are the offload layer's (core/offload/sparse_attention.h). Not thread-safe:
// one step at a time.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/communicator.h"
#include "core/base/status.h"
#include "core/kv/kv_cache.h"
#include "core/model/model.h"
#include "core/model/step_batch.h"
#include "core/model/step_context.h"
#include "core/offload/offload_config.h"
#include "core/offload/sparse_attention.h"

namespace pulse {

struct ModelRunnerOptions {
  int32_t max_step_tokens = 512;   // tokens of one step
  int32_t max_seqs = 16;           // sequences of one step
  int32_t max_blocks_per_seq = 0;  // the longest block table a sequence may have
  int32_t max_logit_rows = 0;      // logit rows of one step; 0: max_seqs (one a sequence)
  // Sparse decode attention for the sequences whose StepBatch entry has a selection (summaries
  // under offload->estimator), and with both tiers sized (host_tokens and slot_tokens > 0)
  // offloaded KV: the cache's last slot_tokens / block_tokens blocks become the device tier's
  // slots, which no block table may name. Empty: every sequence attends densely.
  std::optional<OffloadConfig> offload = std::nullopt;
  // Replay decode steps (one token a sequence, its rows dense, sparse or both) as graphs on
  // backends that have them (Backend::SupportsGraphs): one graph per shape (sequences,
  // block-table width, the sparse step's padded plan and runs of rows of each kind), captured the
  // second time the shape runs; an offloaded step's recall and write-back are branches of its
  // graph on the copy stream. The same ops as without, so the same results. A step whose recall
  // the host plans (the baseline executors) cannot be captured and runs op by op.
  bool decode_graphs = true;
  // The most micro-batches a decode step may run as (1 to kMaxMicroBatches): each past the
  // first has its own scratch, sized for half of max_seqs sequences.
  int32_t max_micro_batches = 1;
};

inline constexpr int32_t kMaxMicroBatches = 8;

// How the runner's decode steps ran with ModelRunnerOptions::decode_graphs.
struct GraphStats {
  int64_t captured = 0;  // graphs captured (a shape again after its graph went stale counts again)
  int64_t launched = 0;  // steps replayed from a graph
  int64_t failed = 0;    // captures that failed (that shape then runs op by op)
};

class ModelRunner {
 public:
  // Allocates the scratch activations for max_step_tokens tokens, max_seqs sequences and
  // max_logit_rows logit rows on the model's backend (ResourceExhausted when they do not fit).
  // `cache` must match the model (its layers and its shard's KV heads). A shard of a model split
  // over several ranks (Model::shard) runs with `ranks`, its rank's communicator, through which
  // every step gathers the ranks' attention outputs, MLP activations, hidden columns and logit
  // columns (docs/design/tensor-parallel.md): every rank's runner must then be given the same
  // calls, each on a thread of its own, and each computes the whole step's logits.
  static absl::StatusOr<ModelRunner> Create(std::shared_ptr<const Model> model, KvCache cache,
                                            ModelRunnerOptions options,
                                            std::unique_ptr<Communicator> ranks = nullptr);

  const Model& model() const { return *model_; }
  const KvCache& cache() const { return cache_; }
  const ModelRunnerOptions& options() const { return options_; }
  // The rank's communicator (null at one rank).
  Communicator* ranks() const { return ranks_.get(); }
  // Totals of the sparse selections so far (zeros without sparse attention), of every
  // sequence or of the one named `key` (SparseSelection::key).
  SparseAttentionStats sparse_stats() const;
  SparseAttentionStats sparse_stats(uint64_t key) const;
  // Totals of the offloaded KV's transfers and device tier (zeros without offload).
  OffloadStats offload_stats() const;
  const GraphStats& graph_stats() const { return graph_stats_; }
  // Host waits for the device in the last step besides reading its outputs (its tokens or
  // logits, and the sparse counters with them): 0 for a step the device drives alone
  // (Backend::host_waits).
  int64_t step_host_waits() const { return step_host_waits_; }
  // The host tier, which the scheduler grows as it admits offloaded requests (null without).
  HostTier* host_tier() { return sparse_ == nullptr ? nullptr : sparse_->host_tier(); }
  const HostTier* host_tier() const { return sparse_ == nullptr ? nullptr : sparse_->host_tier(); }
  // Forgets the statistics sparse attention keeps of sequence `key` (a finished request); the
  // slots of its host blocks are freed with FreeSlots. Between steps only.
  absl::Status ForgetSparse(uint64_t key);
  // A running sequence moved between the tiers (SparseAttention::MoveToHost, MoveToDevice,
  // FreeSlots), between steps only (FailedPrecondition while a step is open, or without tiers).
  absl::Status MoveToHost(std::span<const int32_t> device_blocks,
                          std::span<const int32_t> host_blocks);
  absl::Status MoveToDevice(std::span<const int32_t> host_blocks,
                            std::span<const int32_t> device_blocks);
  absl::Status FreeSlots(std::span<const int32_t> host_blocks);
  // The host -> device link's rate in bytes a second (SparseAttention::CalibrateLink);
  // FailedPrecondition without offloaded KV or while a step is open.
  absl::StatusOr<double> CalibrateLink(int64_t bytes);

  // Runs the whole step and writes the wanted rows' logits, [batch.num_logit_rows()][vocab], to
  // the host span `logits` (which must hold exactly that many values). A decode step (one new
  // token a sequence) runs as min(micro_batches, its sequences) micro-batches, any other step
  // as one; the results are the same for any count on a backend whose kernels compute a row
  // alike whatever the batch (the CPU backend's do). InvalidArgument naming what is wrong with
  // the batch (checked against the options, the cache and the vocabulary) or for micro_batches
  // outside 1 to max_micro_batches. A step that fails after its upload is ended by the next one.
  absl::Status Forward(const StepBatch& batch, std::span<float> logits, int32_t micro_batches = 1);
  // As Forward, but draws one token per logit row on the backend (only the tokens come back to
  // the host): tokens[r] from row r with sampling[r], whose history offsets point into
  // penalised_ids, or -1 for a row that cannot be sampled (core/backend/sampling.h).
  absl::Status ForwardAndSample(const StepBatch& batch, std::span<const TokenSampling> sampling,
                                std::span<const int32_t> penalised_ids, std::span<int32_t> tokens,
                                int32_t micro_batches = 1);
  // As Forward for a tensor-parallel rank past the first, whose logits nobody reads: runs the
  // step and its collectives and reads back only what ends the step (the offload counters).
  absl::Status ForwardAsPeer(const StepBatch& batch, int32_t micro_batches = 1);
  // The micro-batches the last step ran as.
  int32_t step_micro_batches() const { return micro_batches_; }
  // Whether the last step ran its shape for the first time or captured its graph: set-up that
  // later steps of the shape do not repeat, so its time is not theirs.
  bool step_first_of_shape() const { return step_first_of_shape_; }

 private:
  // A decode shape's graph. A shape runs op by op the first time (sizing the backend's scratch
  // memory), is captured the second.
  struct StepGraphEntry {
    std::unique_ptr<StepGraph> graph;
    bool ran = false;             // ran once op by op
    bool capture_failed = false;  // never try again
    int64_t last_used = 0;
  };
  // The micro-batch count, then for each micro-batch num_tokens, num_seqs, num_logit_rows and
  // max_blocks_per_seq and its sparse step's shape (zeros without one): they fix every launch
  // shape and where each input sits in the step's buffers.
  using StepShape = std::vector<int64_t>;

  ModelRunner(std::shared_ptr<const Model> model, KvCache cache, const ModelRunnerOptions& options,
              std::vector<StepContext> contexts, StepOutputs outputs,
              std::unique_ptr<SparseAttention> sparse, std::unique_ptr<Communicator> ranks);
  // Where the rank writes its part of an activation that is gathered across the ranks: `part`,
  // or the whole itself at one rank.
  void* PartOf(const DeviceBuffer& part, const DeviceBuffer& whole) const {
    return ranks_ == nullptr ? whole.data() : part.data();
  }
  // Gathers the ranks' parts ([rows][part_bytes] each) into `whole`; nothing at one rank.
  void Gather(const DeviceBuffer& part, int64_t rows, size_t part_bytes, const DeviceBuffer& whole);
  absl::Status Check(const StepBatch& batch) const;
  // FailedPrecondition naming `call` while a step is open; OffloadBetweenSteps also without
  // offload, else the offload layer.
  absl::Status CheckBetweenSteps(const char* call) const;
  absl::StatusOr<SparseAttention*> OffloadBetweenSteps(const char* call);
  // Checks the step, splits it into micro-batches and uploads each.
  absl::Status Upload(const StepBatch& batch, int32_t micro_batches);
  // Upload, then RunStep; a step that fails to run is ended here.
  absl::Status UploadAndRun(const StepBatch& batch, int32_t micro_batches);
  // Uploads sequences [first_seq, end_seq) of the batch into `context`.
  absl::Status UploadMicroBatch(const StepBatch& batch, int32_t first_seq, int32_t end_seq,
                                StepContext& context);
  // Plans the micro-batch's sparse attention (sequences with a selection).
  absl::Status PlanSparse(const StepBatch& batch, StepContext& context);
  // Embedding, layers and logits of the uploaded step: from a graph when it can.
  absl::Status RunStep();
  // Whether the step replayed a graph (false: run it op by op).
  absl::StatusOr<bool> ReplayGraph();
  // The step's ops, in order: embedding, layers, the sparse steps' end, logits.
  absl::Status RunOps();
  absl::Status RunLayers();
  // The stages of one micro-batch.
  void Embed(StepContext& context);
  // Fails only when a write-back cannot be enqueued.
  absl::Status PreAttention(StepContext& context, int32_t layer);
  // The sparse rows' picks and tables, and their recall enqueued; fails only for a selection
  // the device tier cannot hold.
  absl::Status Select(StepContext& context, int32_t layer);
  absl::Status Attend(StepContext& context, int32_t layer);
  void PostAttention(StepContext& context, int32_t layer);
  // Every micro-batch's logit rows, gathered, then the output projection once.
  void Logits();
  absl::Status CopyLogits(std::span<float> logits);
  absl::Status SampleLogits(std::span<const TokenSampling> sampling,
                            std::span<const int32_t> penalised_ids, std::span<int32_t> tokens);
  PagedKvBatch KvBatch(const StepContext& context, int32_t layer) const;
  std::span<StepContext> step_contexts() {
    return std::span<StepContext>(contexts_).first(static_cast<size_t>(micro_batches_));
  }
  // Ends the step after its outputs are read (`read` their status, in `output_reads` host
  // waits): collects the sparse counters ReadOutputs brought back, or abandons the sparse steps
  // when something failed.
  absl::Status EndStep(const absl::Status& read, int64_t output_reads);
  // EndStep after reading the sparse counters, when a micro-batch's sparse attention ran and
  // `read` (the step's other outputs, in `output_reads` host waits) succeeded.
  absl::Status EndStepAfterCounters(absl::Status read, int64_t output_reads);
  // Whether a micro-batch's sparse attention ran (its counters must be read).
  bool SparseStepOpen(const StepContext& context) const;
  bool AnySparseStepOpen() const;
  // Reads the first `token_bytes` of the step's outputs and, when its sparse rows counted, their
  // counters, in one copy, into host_outputs_.
  absl::Status ReadOutputs(size_t token_bytes);
  // The sparse counters ReadOutputs brought back for sequences from `first_seq` on (empty when
  // none).
  std::span<const int64_t> counters(int32_t first_seq) const;

  std::shared_ptr<const Model> model_;
  KvCache cache_;
  ModelRunnerOptions options_;
  std::vector<StepContext> contexts_;  // [max_micro_batches]; the first holds a whole step
  StepOutputs outputs_;
  std::unique_ptr<SparseAttention> sparse_;  // with options.offload
  std::unique_ptr<Communicator> ranks_;      // with a shard of several ranks
  const StepBatch* batch_ = nullptr;         // the step's batch, from its upload to its end
  int32_t micro_batches_ = 1;                // of the current (or last) step
  bool step_open_ = false;                   // from the step's upload to its end
  int64_t waits_before_ = 0;                 // Backend::host_waits() when the step began
  bool step_first_of_shape_ = false;
  int64_t step_host_waits_ = 0;
  std::vector<int64_t> counters_;   // zeros of the step's sparse counters, uploaded at its start
  std::vector<char> host_outputs_;  // the host side of the step's outputs (tokens, counters)
  std::map<StepShape, StepGraphEntry> graphs_;
  int64_t graph_clock_ = 0;  // for StepGraphEntry::last_used
  GraphStats graph_stats_;
  // Dimensions of the model, cached: those of the rank's shard (Model::dims), but hidden_ and
  // vocab_, and attn_dim_ (the query heads of all ranks).
  int64_t hidden_ = 0;
  int32_t num_heads_ = 0;
  int64_t q_dim_ = 0;
  int64_t kv_dim_ = 0;
  int64_t qkv_dim_ = 0;
  int64_t attn_dim_ = 0;
  int64_t hidden_rows_ = 0;
  int64_t inter_ = 0;
  int64_t vocab_ = 0;
};

}  // namespace pulse
