// The Llama-family forward pass as per-layer stages over one step's batch (DESIGN.md, "one
// decode step as data"): Prepare uploads the step's inputs and embeds the tokens; then per layer
// PreAttention (norm, QKV projection, RoPE, KV append), Attention, PostAttention (O projection,
// norm, MLP); then Logits. Forward is the plain loop over them; a scheduler may instead run the
// stages itself. Not thread-safe: one step at a time.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/backend/backend.h"
#include "core/base/status.h"
#include "core/kv/kv_cache.h"
#include "core/model/model.h"
#include "core/model/offloaded_kv.h"
#include "core/model/sparse_attention.h"
#include "core/model/step_batch.h"

namespace pulse {

struct ModelRunnerOptions {
  int32_t max_step_tokens = 512;   // tokens of one step
  int32_t max_seqs = 16;           // sequences of one step
  int32_t max_blocks_per_seq = 0;  // the longest block table a sequence may have
  int32_t max_logit_rows = 0;      // logit rows of one step; 0: max_seqs (one a sequence)
  // The two-tier KV of offloaded sequences (offloaded_kv.h): the cache's last
  // offload->slot_blocks blocks become the device tier's slots, which no block table may name.
  std::optional<OffloadOptions> offload = std::nullopt;
  // How much of each key channel's range a block summary keeps around its midpoint
  // (Backend::SummarizeBlocks): 1 scores blocks by Quest's upper bound of q.k, 0 (the default)
  // by the q.k of the box's center, which the accuracy report found to pick better blocks.
  float summary_radius = 0.0f;
  // Replay decode steps (one token a sequence, dense attention) as graphs on backends that have
  // them (Backend::SupportsGraphs): one graph per shape (sequences, block-table width), captured
  // the second time the shape runs. The same ops as without, so the same results.
  bool decode_graphs = true;
};

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
  // `cache` must match the model (its layers and KV heads).
  static absl::StatusOr<ModelRunner> Create(std::shared_ptr<const Model> model, KvCache cache,
                                            ModelRunnerOptions options);

  const Model& model() const { return *model_; }
  const KvCache& cache() const { return cache_; }
  const ModelRunnerOptions& options() const { return options_; }
  // Totals of the sparse selections so far (zeros before the first sparse step), of every
  // sequence or of the one named `key` (SparseSelection::key).
  SparseAttentionStats sparse_stats() const;
  SparseAttentionStats sparse_stats(uint64_t key) const;
  // Totals of the offloaded KV's transfers and slot caches (zeros without offload), and the slot
  // caches' counts of sequence `key`.
  OffloadStats offload_stats() const;
  CacheStats offload_stats(uint64_t key) const;
  // Sequence `key`'s slot-cache counts in one layer (zeros without offload).
  CacheStats offload_stats(uint64_t key, int32_t layer) const;
  const GraphStats& graph_stats() const { return graph_stats_; }
  // Forgets what sparse attention and the offloaded KV keep of sequence `key` (a finished
  // request): its selections, totals and device slots. Between steps only (FailedPrecondition
  // while a step that reads its slots is in flight).
  absl::Status ForgetSparse(uint64_t key);

  // Runs the whole step and writes the wanted rows' logits, [batch.num_logit_rows()][vocab], to
  // the host span `logits` (which must hold exactly that many values).
  absl::Status Forward(const StepBatch& batch, std::span<float> logits);
  // Runs the whole step and draws one token per logit row on the backend (only the tokens come
  // back to the host): tokens[r] from row r with sampling[r], whose history offsets point into
  // penalised_ids, or -1 for a row that cannot be sampled (core/backend/sampling.h).
  absl::Status ForwardAndSample(const StepBatch& batch, std::span<const TokenSampling> sampling,
                                std::span<const int32_t> penalised_ids, std::span<int32_t> tokens);

  // The stages. Prepare checks the batch against the options, the cache and the vocabulary
  // (InvalidArgument naming what is wrong), uploads it and embeds its tokens; the layer stages
  // then run in order for layer 0, 1, ..., then Logits computes the logit rows on the backend,
  // and CopyLogits or SampleLogits ends the step (a step abandoned before is ended by the next
  // Prepare).
  absl::Status Prepare(const StepBatch& batch);
  // Fails only when a write-back cannot be enqueued.
  absl::Status PreAttention(int32_t layer);
  // Fails only for a sparse selection the model cannot take or the device tier cannot hold
  // (SparseAttention::Attend).
  absl::Status Attention(int32_t layer);
  void PostAttention(int32_t layer);
  void Logits();
  absl::Status CopyLogits(std::span<float> logits);
  absl::Status SampleLogits(std::span<const TokenSampling> sampling,
                            std::span<const int32_t> penalised_ids, std::span<int32_t> tokens);

 private:
  struct Scratch {
    DeviceBuffer inputs;  // int32: the packed StepBatch (see Prepare)
    // fp32, or the backend's activation type (act) for the GEMM inputs.
    DeviceBuffer residual;  // [tokens][hidden]
    DeviceBuffer normed;    // act [tokens][hidden]
    DeviceBuffer qkv;       // [tokens][q_dim + 2 * kv_dim]
    DeviceBuffer attn;      // act [tokens][q_dim]
    DeviceBuffer delta;     // [tokens][hidden]: o projection, then MLP output
    DeviceBuffer gate_up;   // [tokens][2 * intermediate]
    DeviceBuffer act;       // act [tokens][intermediate]
    DeviceBuffer gathered;  // act [logit rows][hidden]
    DeviceBuffer logits;    // [logit rows][vocab]
    DeviceBuffer sampling;  // TokenSampling [logit rows]
    DeviceBuffer tokens;    // int32 [logit rows]
  };
  // Where the current step's inputs sit in Scratch::inputs.
  struct StepInputs {
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t num_logit_rows = 0;
    int32_t max_blocks_per_seq = 0;
    int32_t max_q_len = 0;
    int32_t max_kv_len = 0;
    const int32_t* tokens = nullptr;
    const int32_t* positions = nullptr;
    const int32_t* kv_lens = nullptr;
    const int32_t* q_offsets = nullptr;
    const int32_t* block_tables = nullptr;
    const int32_t* logit_rows = nullptr;
  };

  // A decode shape's graph. A shape runs op by op the first time (sizing the backend's scratch
  // memory), is captured the second.
  struct StepGraphEntry {
    std::unique_ptr<StepGraph> graph;
    bool ran = false;             // ran once op by op
    bool capture_failed = false;  // never try again
    int64_t last_used = 0;
  };
  // num_tokens, num_seqs, num_logit_rows and max_blocks_per_seq of a decode step: they fix every
  // launch shape and where each input sits in Scratch::inputs.
  using StepShape = std::array<int32_t, 4>;

  ModelRunner(std::shared_ptr<const Model> model, KvCache cache, const ModelRunnerOptions& options,
              Scratch scratch);
  absl::Status Check(const StepBatch& batch) const;
  // Prepare without the embedding.
  absl::Status Upload(const StepBatch& batch);
  void Embed();
  // Embedding, layers and logits of the uploaded step: from a graph when it can.
  absl::Status RunStep();
  // Whether the step replayed a graph (false: run it op by op).
  absl::StatusOr<bool> ReplayGraph();
  PagedKvBatch KvBatch(int32_t layer) const;
  absl::Status RunLayers();
  // Waits for the step's write-backs and releases the device slots it read.
  absl::Status EndStep();

  std::shared_ptr<const Model> model_;
  KvCache cache_;
  ModelRunnerOptions options_;
  Scratch scratch_;
  StepInputs step_;
  std::vector<int32_t> staging_;      // the host side of Scratch::inputs
  DeviceBuffer penalised_ids_;        // int32, grown to the longest list SampleLogits was given
  const StepBatch* batch_ = nullptr;  // the step's batch, from Prepare to the end of the step
  std::unique_ptr<OffloadedKv> offloaded_;   // with options.offload
  std::unique_ptr<SparseAttention> sparse_;  // made by the first step with a sparse sequence
  bool step_open_ = false;                   // from Prepare to the end of the step
  std::map<StepShape, StepGraphEntry> graphs_;
  int64_t graph_clock_ = 0;  // for StepGraphEntry::last_used
  GraphStats graph_stats_;
  // Dimensions of the model, cached.
  int64_t hidden_ = 0;
  int64_t q_dim_ = 0;
  int64_t kv_dim_ = 0;
  int64_t qkv_dim_ = 0;
  int64_t inter_ = 0;
  int64_t vocab_ = 0;
};

}  // namespace pulse
