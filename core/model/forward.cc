#include "core/model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pulse {
namespace {

// Bounds that keep every scratch size far inside int64 with the config's own bounds.
constexpr int32_t kMaxStepTokens = 1 << 16;
constexpr int32_t kMaxSeqs = 1 << 12;
constexpr int32_t kMaxBlocksPerSeq = 1 << 20;

absl::StatusOr<DeviceBuffer> AllocateArray(Backend& backend, int64_t count, DType type) {
  return backend.Allocate(static_cast<size_t>(count) * DTypeBytes(type));
}

// Decode steps round their block-table width up to a multiple of this many tokens, so that a
// graph of one width serves a sequence's next steps until it grows past it.
constexpr int32_t kGraphWidthTokens = 1024;
// Graphs a runner keeps; the least recently used goes first.
constexpr size_t kMaxStepGraphs = 32;

// A decode step graphs may replay: one token a sequence, no staged prompt. Dense and sparse
// rows may mix: the sparse step's shape keys the runs of each kind.
bool IsGraphableDecode(int32_t max_q_len, const StepBatch& batch) {
  return max_q_len == 1 && !batch.has_staged();
}

// Ints of the packed step inputs for the given sizes: tokens and positions [tokens], kv_lens
// [seqs], q_offsets [seqs + 1], block tables [seqs][blocks_per_seq], logit rows [rows].
int64_t InputInts(int64_t tokens, int64_t seqs, int64_t blocks_per_seq, int64_t rows) {
  return 2 * tokens + 2 * seqs + 1 + seqs * blocks_per_seq + rows;
}

}  // namespace

absl::StatusOr<ModelRunner> ModelRunner::Create(std::shared_ptr<const Model> model, KvCache cache,
                                                ModelRunnerOptions options,
                                                std::unique_ptr<Communicator> ranks) {
  if (options.max_logit_rows == 0) options.max_logit_rows = options.max_seqs;
  if (model == nullptr) return absl::InvalidArgumentError("model runner: no model");
  if (options.max_step_tokens < 1 || options.max_step_tokens > kMaxStepTokens ||
      options.max_seqs < 1 || options.max_seqs > kMaxSeqs || options.max_blocks_per_seq < 1 ||
      options.max_blocks_per_seq > kMaxBlocksPerSeq || options.max_logit_rows < 1 ||
      options.max_logit_rows > kMaxStepTokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model runner: max_step_tokens %d (1 to %d), max_seqs %d (1 to %d), max_blocks_per_seq "
        "%d (1 to %d), max_logit_rows %d (1 to %d)",
        options.max_step_tokens, kMaxStepTokens, options.max_seqs, kMaxSeqs,
        options.max_blocks_per_seq, kMaxBlocksPerSeq, options.max_logit_rows, kMaxStepTokens));
  }
  const ModelConfig& config = model->config();
  const ShardDims& dims = model->dims();
  const PagedKvLayout& layout = cache.layout();
  if (cache.num_layers() != config.num_layers || layout.num_kv_heads != dims.num_kv_heads ||
      layout.head_dim != config.head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model runner: the KV cache has %d layers x %d heads x %d dims, the model %d x %d x %d",
        cache.num_layers(), layout.num_kv_heads, layout.head_dim, config.num_layers,
        dims.num_kv_heads, config.head_dim));
  }
  const TensorShard& shard = model->shard();
  const bool split = shard.size > 1;
  if (split != (ranks != nullptr) ||
      (split && (ranks->size() != shard.size || ranks->rank() != shard.rank))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model runner: the model is rank %d of %d ranks, the communicator rank %d of %d",
        shard.rank, shard.size, ranks == nullptr ? 0 : ranks->rank(),
        ranks == nullptr ? 1 : ranks->size()));
  }
  Backend& backend = model->backend();
  PULSE_RETURN_IF_ERROR(backend.CheckAttention(dims.num_heads, layout));
  const int64_t seqs = options.max_seqs;
  const int64_t logit_rows = options.max_logit_rows;
  const int64_t hidden = config.hidden_size;
  const int64_t q_dim = int64_t{dims.num_heads} * config.head_dim;
  const int64_t kv_dim = int64_t{dims.num_kv_heads} * config.head_dim;
  const int64_t attn_dim = int64_t{config.num_heads} * config.head_dim;
  const int64_t inter = dims.intermediate;
  if (options.max_micro_batches < 1 || options.max_micro_batches > kMaxMicroBatches) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model runner: max_micro_batches %d (1 to %d)", options.max_micro_batches,
                        kMaxMicroBatches));
  }
  const DType f32 = DType::kF32;
  const DType act = backend.activation_type();
  std::unique_ptr<SparseAttention> sparse;
  if (options.offload) {
    const int32_t block_tokens = layout.block_tokens;
    const bool tiered = options.offload->host_tokens > 0 && options.offload->slot_tokens > 0;
    const int64_t slots =
        tiered ? (options.offload->slot_tokens + block_tokens - 1) / block_tokens : 0;
    if (slots >= cache.num_blocks()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model runner: %d device slots of a KV cache of %d blocks (the rest is the dense pool)",
          slots, cache.num_blocks()));
    }
    PULSE_ASSIGN_OR_RETURN(
        sparse,
        SparseAttention::Create(backend, cache, cache.num_blocks() - static_cast<int32_t>(slots),
                                *options.offload,
                                {.max_seqs = options.max_seqs,
                                 .max_blocks_per_seq = options.max_blocks_per_seq,
                                 .max_step_tokens = options.max_step_tokens,
                                 .num_heads = dims.num_heads,
                                 .ranks = ranks.get()}));
  }
  // The first context holds a whole step; the others a decode micro-batch of a split step, at
  // most half of its sequences.
  std::vector<StepContext> contexts(static_cast<size_t>(options.max_micro_batches));
  const int32_t half = (options.max_seqs + 1) / 2;
  for (size_t i = 0; i < contexts.size(); ++i) {
    StepContext& context = contexts[i];
    context.limits = i == 0 ? StepContext::Limits{.tokens = options.max_step_tokens,
                                                  .seqs = options.max_seqs,
                                                  .logit_rows = options.max_logit_rows}
                            : StepContext::Limits{.tokens = half, .seqs = half, .logit_rows = half};
    const int64_t tokens = context.limits.tokens;
    StepContext::Scratch& scratch = context.scratch;
    PULSE_ASSIGN_OR_RETURN(
        scratch.inputs, backend.Allocate(static_cast<size_t>(InputInts(tokens, context.limits.seqs,
                                                                       options.max_blocks_per_seq,
                                                                       context.limits.logit_rows)) *
                                         sizeof(int32_t)));
    PULSE_ASSIGN_OR_RETURN(scratch.residual, AllocateArray(backend, tokens * hidden, f32));
    PULSE_ASSIGN_OR_RETURN(scratch.normed, AllocateArray(backend, tokens * hidden, act));
    PULSE_ASSIGN_OR_RETURN(scratch.qkv, AllocateArray(backend, tokens * (q_dim + 2 * kv_dim), f32));
    PULSE_ASSIGN_OR_RETURN(scratch.attn, AllocateArray(backend, tokens * attn_dim, act));
    PULSE_ASSIGN_OR_RETURN(scratch.delta, AllocateArray(backend, tokens * hidden, f32));
    PULSE_ASSIGN_OR_RETURN(scratch.gate_up, AllocateArray(backend, tokens * 2 * inter, f32));
    PULSE_ASSIGN_OR_RETURN(scratch.act,
                           AllocateArray(backend, tokens * config.intermediate_size, act));
    if (split) {
      PULSE_ASSIGN_OR_RETURN(scratch.attn_part, AllocateArray(backend, tokens * q_dim, act));
      PULSE_ASSIGN_OR_RETURN(scratch.act_part, AllocateArray(backend, tokens * inter, act));
      PULSE_ASSIGN_OR_RETURN(scratch.delta_part,
                             AllocateArray(backend, tokens * dims.hidden_rows, f32));
    }
    if (sparse != nullptr) {
      PULSE_ASSIGN_OR_RETURN(context.sparse,
                             sparse->NewStep(context.limits.seqs, context.limits.tokens));
    }
  }
  StepOutputs outputs;
  PULSE_ASSIGN_OR_RETURN(outputs.gathered, AllocateArray(backend, logit_rows * hidden, act));
  PULSE_ASSIGN_OR_RETURN(outputs.logits,
                         AllocateArray(backend, logit_rows * config.vocab_size, f32));
  if (split) {
    PULSE_ASSIGN_OR_RETURN(outputs.logits_part,
                           AllocateArray(backend, logit_rows * dims.vocab_rows, f32));
  }
  PULSE_ASSIGN_OR_RETURN(outputs.sampling,
                         backend.Allocate(static_cast<size_t>(logit_rows) * sizeof(TokenSampling)));
  outputs.counters_offset = static_cast<size_t>((logit_rows + 1) / 2 * 2) * sizeof(int32_t);
  PULSE_ASSIGN_OR_RETURN(
      outputs.outputs,
      backend.Allocate(outputs.counters_offset +
                       static_cast<size_t>(seqs * kSparseCounters) * sizeof(int64_t)));
  return ModelRunner(std::move(model), std::move(cache), options, std::move(contexts),
                     std::move(outputs), std::move(sparse), std::move(ranks));
}

ModelRunner::ModelRunner(std::shared_ptr<const Model> model, KvCache cache,
                         const ModelRunnerOptions& options, std::vector<StepContext> contexts,
                         StepOutputs outputs, std::unique_ptr<SparseAttention> sparse,
                         std::unique_ptr<Communicator> ranks)
    : model_(std::move(model)),
      cache_(std::move(cache)),
      options_(options),
      contexts_(std::move(contexts)),
      outputs_(std::move(outputs)),
      sparse_(std::move(sparse)),
      ranks_(std::move(ranks)) {
  const ModelConfig& config = model_->config();
  const ShardDims& dims = model_->dims();
  hidden_ = config.hidden_size;
  num_heads_ = dims.num_heads;
  q_dim_ = int64_t{dims.num_heads} * config.head_dim;
  kv_dim_ = int64_t{dims.num_kv_heads} * config.head_dim;
  qkv_dim_ = q_dim_ + 2 * kv_dim_;
  attn_dim_ = int64_t{config.num_heads} * config.head_dim;
  hidden_rows_ = dims.hidden_rows;
  inter_ = dims.intermediate;
  vocab_ = config.vocab_size;
}

void ModelRunner::Gather(const DeviceBuffer& part, int64_t rows, size_t part_bytes,
                         const DeviceBuffer& whole) {
  if (ranks_ != nullptr) ranks_->AllGather(part.data(), rows, part_bytes, whole.data());
}

absl::Status ModelRunner::Forward(const StepBatch& batch, std::span<float> logits,
                                  int32_t micro_batches) {
  PULSE_RETURN_IF_ERROR(UploadAndRun(batch, micro_batches));
  return CopyLogits(logits);
}

absl::Status ModelRunner::ForwardAndSample(const StepBatch& batch,
                                           std::span<const TokenSampling> sampling,
                                           std::span<const int32_t> penalised_ids,
                                           std::span<int32_t> tokens, int32_t micro_batches) {
  PULSE_RETURN_IF_ERROR(UploadAndRun(batch, micro_batches));
  return SampleLogits(sampling, penalised_ids, tokens);
}

absl::Status ModelRunner::ForwardAsPeer(const StepBatch& batch, int32_t micro_batches) {
  PULSE_RETURN_IF_ERROR(UploadAndRun(batch, micro_batches));
  return EndStepAfterCounters(absl::OkStatus(), 0);
}

absl::Status ModelRunner::UploadAndRun(const StepBatch& batch, int32_t micro_batches) {
  PULSE_RETURN_IF_ERROR(Upload(batch, micro_batches));
  if (const absl::Status ran = RunStep(); !ran.ok()) return EndStep(ran, 0);
  return absl::OkStatus();
}

absl::Status ModelRunner::RunStep() {
  step_first_of_shape_ = false;
  if (IsGraphableDecode(contexts_[0].step.max_q_len, *batch_) && options_.decode_graphs &&
      model_->backend().SupportsGraphs()) {
    PULSE_ASSIGN_OR_RETURN(const bool replayed, ReplayGraph());
    if (replayed) return absl::OkStatus();
  }
  return RunOps();
}

absl::Status ModelRunner::RunOps() {
  for (StepContext& context : step_contexts()) Embed(context);
  PULSE_RETURN_IF_ERROR(RunLayers());
  for (StepContext& context : step_contexts()) {
    if (context.sparse_planned) PULSE_RETURN_IF_ERROR(sparse_->FinishStep(*context.sparse));
    if (context.staged) PULSE_RETURN_IF_ERROR(sparse_->staged()->Finish());
  }
  Logits();
  return absl::OkStatus();
}

absl::StatusOr<bool> ModelRunner::ReplayGraph() {
  Backend& backend = model_->backend();
  StepShape shape = {micro_batches_};
  for (const StepContext& context : step_contexts()) {
    shape.insert(shape.end(), {context.step.num_tokens, context.step.num_seqs,
                               context.step.num_logit_rows, context.step.max_blocks_per_seq});
    if (context.sparse_planned) context.sparse->AppendShape(shape);
  }
  auto found = graphs_.find(shape);
  if (found == graphs_.end()) {
    if (graphs_.size() >= kMaxStepGraphs) {
      graphs_.erase(std::min_element(
          graphs_.begin(), graphs_.end(),
          [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; }));
    }
    found = graphs_.emplace(std::move(shape), StepGraphEntry{}).first;
  }
  StepGraphEntry& entry = found->second;
  entry.last_used = ++graph_clock_;
  if (entry.graph != nullptr) {
    const absl::Status launched = backend.LaunchGraph(*entry.graph);
    if (launched.ok()) {
      ++graph_stats_.launched;
      return true;
    }
    // A stale graph (the backend's scratch memory moved): capture it again.
    if (!absl::IsFailedPrecondition(launched)) return launched;
    entry.graph = nullptr;
  }
  if (entry.capture_failed) return false;
  if (!std::exchange(entry.ran, true)) {
    step_first_of_shape_ = true;
    return false;
  }
  // Busy (another runner of the backend captures): this step runs op by op.
  if (!backend.BeginCapture().ok()) return false;
  const absl::Status ops = RunOps();
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend.EndCapture();
  if (!ops.ok() || !graph.ok()) {
    entry.capture_failed = true;
    ++graph_stats_.failed;
    return false;
  }
  entry.graph = *std::move(graph);
  ++graph_stats_.captured;
  step_first_of_shape_ = true;
  PULSE_RETURN_IF_ERROR(backend.LaunchGraph(*entry.graph));
  ++graph_stats_.launched;
  return true;
}

// Micro-batch k's layer l runs PreAttention and Select, which enqueues its recall, then every
// other micro-batch's attention and MLP of its previous layer and selection of this one run
// before Attend(k, l) waits for that recall: so the copy engine has one micro-batch's recall to
// move while the compute stream runs the others' work. One micro-batch runs the plain layer
// order.
absl::Status ModelRunner::RunLayers() {
  const int32_t layers = model_->config().num_layers;
  for (int32_t layer = 0; layer <= layers; ++layer) {
    for (StepContext& context : step_contexts()) {
      if (layer > 0) {
        PULSE_RETURN_IF_ERROR(Attend(context, layer - 1));
        PostAttention(context, layer - 1);
      }
      if (layer < layers) {
        PULSE_RETURN_IF_ERROR(PreAttention(context, layer));
        PULSE_RETURN_IF_ERROR(Select(context, layer));
      }
    }
  }
  return absl::OkStatus();
}

SparseAttentionStats ModelRunner::sparse_stats() const {
  return sparse_ == nullptr ? SparseAttentionStats{} : sparse_->stats();
}

SparseAttentionStats ModelRunner::sparse_stats(uint64_t key) const {
  return sparse_ == nullptr ? SparseAttentionStats{} : sparse_->stats(key);
}

OffloadStats ModelRunner::offload_stats() const {
  return sparse_ == nullptr ? OffloadStats{} : sparse_->offload_stats();
}

absl::Status ModelRunner::CheckBetweenSteps(const char* call) const {
  if (step_open_) return absl::FailedPreconditionError(absl::StrCat(call, " while a step is open"));
  return absl::OkStatus();
}

absl::StatusOr<SparseAttention*> ModelRunner::OffloadBetweenSteps(const char* call) {
  PULSE_RETURN_IF_ERROR(CheckBetweenSteps(call));
  if (sparse_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(call, " without offload"));
  }
  return sparse_.get();
}

absl::Status ModelRunner::ForgetSparse(uint64_t key) {
  PULSE_RETURN_IF_ERROR(CheckBetweenSteps("ForgetSparse"));
  if (sparse_ != nullptr) sparse_->Forget(key);
  return absl::OkStatus();
}

absl::Status ModelRunner::FreeSlots(std::span<const int32_t> host_blocks) {
  PULSE_RETURN_IF_ERROR(CheckBetweenSteps("FreeSlots"));
  return sparse_ == nullptr ? absl::OkStatus() : sparse_->FreeSlots(host_blocks);
}

absl::Status ModelRunner::MoveToHost(std::span<const int32_t> device_blocks,
                                     std::span<const int32_t> host_blocks) {
  PULSE_ASSIGN_OR_RETURN(SparseAttention * sparse, OffloadBetweenSteps("MoveToHost"));
  return sparse->MoveToHost(device_blocks, host_blocks);
}

absl::Status ModelRunner::MoveToDevice(std::span<const int32_t> host_blocks,
                                       std::span<const int32_t> device_blocks) {
  PULSE_ASSIGN_OR_RETURN(SparseAttention * sparse, OffloadBetweenSteps("MoveToDevice"));
  return sparse->MoveToDevice(host_blocks, device_blocks);
}

absl::StatusOr<double> ModelRunner::CalibrateLink(int64_t bytes) {
  PULSE_ASSIGN_OR_RETURN(SparseAttention * sparse, OffloadBetweenSteps("CalibrateLink"));
  return sparse->CalibrateLink(bytes);
}

bool ModelRunner::SparseStepOpen(const StepContext& context) const {
  return context.sparse_planned && sparse_->Attends(*context.sparse);
}

bool ModelRunner::AnySparseStepOpen() const {
  return std::any_of(contexts_.begin(), contexts_.begin() + micro_batches_,
                     [this](const StepContext& context) { return SparseStepOpen(context); });
}

absl::Status ModelRunner::EndStep(const absl::Status& outputs_read, int64_t output_reads) {
  if (!step_open_) return outputs_read;
  step_open_ = false;
  step_host_waits_ = model_->backend().host_waits() - waits_before_ - output_reads;
  // The outputs are the step's only if every collective of it ran.
  absl::Status read = outputs_read;
  if (ranks_ != nullptr) read.Update(ranks_->TakeStatus());
  absl::Status status = read;
  for (StepContext& context : step_contexts()) {
    if (std::exchange(context.staged, false) && !read.ok()) sparse_->staged()->Abandon();
    if (!std::exchange(context.sparse_planned, false)) continue;
    if (read.ok()) {
      status.Update(sparse_->Collect(*context.sparse, counters(context.step.first_seq)));
    } else {
      sparse_->Abandon(*context.sparse);
    }
  }
  return status;
}

absl::Status ModelRunner::Check(const StepBatch& batch) const {
  if (batch.num_seqs() < 1 || batch.num_seqs() > options_.max_seqs) {
    return absl::InvalidArgumentError(absl::StrFormat("step batch: %d sequences, expected 1 to %d",
                                                      batch.num_seqs(), options_.max_seqs));
  }
  if (batch.num_logit_rows() > options_.max_logit_rows) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "step batch: %d logit rows, at most %d", batch.num_logit_rows(), options_.max_logit_rows));
  }
  if (batch.num_tokens() > options_.max_step_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "step batch: %d tokens, at most %d", batch.num_tokens(), options_.max_step_tokens));
  }
  if (batch.max_blocks_per_seq() > options_.max_blocks_per_seq) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step batch: a sequence has %d KV blocks, at most %d",
                        batch.max_blocks_per_seq(), options_.max_blocks_per_seq));
  }
  for (const int32_t token : batch.tokens()) {
    if (token < 0 || token >= vocab_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("step batch: token %d is outside the vocabulary [0, %d)", token, vocab_));
    }
  }
  const int32_t block_tokens = cache_.layout().block_tokens;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t new_tokens = batch.q_offsets()[s + 1] - batch.q_offsets()[s];
    const int32_t kv_len = batch.kv_lens()[s];
    const std::span<const int32_t> blocks = batch.blocks(s);
    if (new_tokens < 1 || kv_len < new_tokens ||
        int64_t{kv_len} > int64_t{block_tokens} * static_cast<int64_t>(blocks.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "step batch: sequence %d has %d new of %d tokens in %d blocks of %d tokens", s,
          new_tokens, kv_len, blocks.size(), block_tokens));
    }
    if (batch.staged(s)) {
      // Its blocks are the staging area's; StagedPrefill::Plan checks them.
      if (sparse_ == nullptr || sparse_->staged() == nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "step batch: sequence %d is a staged prompt chunk and the runner has no host tier "
            "(ModelRunnerOptions::offload)",
            s));
      }
      continue;
    }
    if (batch.has_staged()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "step batch: sequence %d is not a staged prompt chunk, beside staged ones", s));
    }
    // Blocks past the dense pool are the device tier's slots.
    const int32_t dense_blocks = sparse_ == nullptr ? cache_.num_blocks() : sparse_->first_slot();
    const int32_t host_blocks = sparse_ == nullptr ? 0 : sparse_->host_blocks();
    const std::span<const int32_t> host = batch.host_blocks(s);
    const bool offloaded = !host.empty();
    if (offloaded && (!batch.sparse(s) || host_blocks == 0 || host.size() != blocks.size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("step batch: sequence %d has %d host blocks for %d blocks%s", s,
                          host.size(), blocks.size(),
                          !batch.sparse(s)   ? ", without a sparse selection"
                          : host_blocks == 0 ? ", and the runner has no host tier"
                                             : ""));
    }
    if (batch.sparse(s) && sparse_ == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "step batch: sequence %d selects sparsely, and the runner has no sparse attention "
          "(ModelRunnerOptions::offload)",
          s));
    }
    // The blocks the new tokens are written to must be resident, and so must every block of a
    // sequence that attends densely.
    const int32_t first_written = (kv_len - new_tokens) / block_tokens;
    for (size_t j = 0; j < blocks.size(); ++j) {
      const int32_t block = blocks[j];
      const bool may_miss = offloaded && new_tokens == 1 && static_cast<int32_t>(j) < first_written;
      if ((block < 0 && !(block == -1 && may_miss)) || block >= dense_blocks) {
        return absl::InvalidArgumentError(
            absl::StrFormat("step batch: sequence %d uses KV block %d of %d as its block %d", s,
                            block, dense_blocks, j));
      }
      if (offloaded && (host[j] < 0 || host[j] >= host_blocks)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("step batch: sequence %d uses host block %d of %d as its block %d", s,
                            host[j], host_blocks, j));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Upload(const StepBatch& batch, int32_t micro_batches) {
  if (step_open_) EndStep(absl::AbortedError("the step was abandoned"), 0).IgnoreError();
  if (micro_batches < 1 || micro_batches > options_.max_micro_batches) {
    return absl::InvalidArgumentError(absl::StrFormat("%d micro-batches, expected 1 to %d",
                                                      micro_batches, options_.max_micro_batches));
  }
  PULSE_RETURN_IF_ERROR(Check(batch));
  // A collective's failure in an earlier step was that step's.
  if (ranks_ != nullptr) ranks_->TakeStatus().IgnoreError();
  // Only a decode step splits: a prompt chunk's rows are many tokens of one sequence.
  const bool decode = batch.num_tokens() == batch.num_seqs();
  micro_batches_ = decode ? std::min(micro_batches, batch.num_seqs()) : 1;
  batch_ = &batch;
  waits_before_ = model_->backend().host_waits();
  step_open_ = true;
  if (batch.has_sparse()) PULSE_RETURN_IF_ERROR(sparse_->BeginStep());
  // Near-equal shares, the larger first.
  const int32_t share = batch.num_seqs() / micro_batches_;
  const int32_t larger = batch.num_seqs() % micro_batches_;
  int32_t first_seq = 0;
  for (int32_t k = 0; k < micro_batches_; ++k) {
    const int32_t end_seq = first_seq + share + (k < larger ? 1 : 0);
    PULSE_RETURN_IF_ERROR(
        UploadMicroBatch(batch, first_seq, end_seq, contexts_[static_cast<size_t>(k)]));
    first_seq = end_seq;
  }
  if (AnySparseStepOpen()) {
    // The sparse rows count from zero (read back with the step's tokens).
    counters_.assign(static_cast<size_t>(batch.num_seqs()) * kSparseCounters, 0);
    model_->backend().CopyToDevice(outputs_.counters(), counters_.data(),
                                   counters_.size() * sizeof(int64_t));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::UploadMicroBatch(const StepBatch& batch, int32_t first_seq,
                                           int32_t end_seq, StepContext& context) {
  const std::span<const int32_t> q_offsets = batch.q_offsets();
  const int32_t first_token = q_offsets[static_cast<size_t>(first_seq)];
  const int32_t end_token = q_offsets[static_cast<size_t>(end_seq)];
  // The logit rows are ascending: this micro-batch's are those among its tokens.
  const std::span<const int32_t> all_rows = batch.logit_rows();
  const auto rows_begin = std::lower_bound(all_rows.begin(), all_rows.end(), first_token);
  const auto rows_end = std::lower_bound(rows_begin, all_rows.end(), end_token);
  StepContext::Inputs step;
  step.first_seq = first_seq;
  step.first_logit_row = static_cast<int32_t>(rows_begin - all_rows.begin());
  step.num_tokens = end_token - first_token;
  step.num_seqs = end_seq - first_seq;
  step.num_logit_rows = static_cast<int32_t>(rows_end - rows_begin);
  if (step.num_tokens > context.limits.tokens || step.num_seqs > context.limits.seqs ||
      step.num_logit_rows > context.limits.logit_rows) {
    return absl::InternalError(absl::StrFormat(
        "micro-batch of %d tokens, %d sequences and %d logit rows past its scratch's %d, %d, %d",
        step.num_tokens, step.num_seqs, step.num_logit_rows, context.limits.tokens,
        context.limits.seqs, context.limits.logit_rows));
  }
  for (int32_t s = first_seq; s < end_seq; ++s) {
    step.max_q_len = std::max(
        step.max_q_len, q_offsets[static_cast<size_t>(s) + 1] - q_offsets[static_cast<size_t>(s)]);
    step.max_kv_len = std::max(step.max_kv_len, batch.kv_lens()[static_cast<size_t>(s)]);
    step.max_blocks_per_seq =
        std::max(step.max_blocks_per_seq, static_cast<int32_t>(batch.blocks(s).size()));
  }
  // A decode step's shapes move in steps of kGraphWidthTokens (graphs or not, so that a replayed
  // graph computes exactly what the ops would): the attention kernels size their launches by
  // max_kv_len and read the true lengths.
  if (step.max_q_len == 1) {
    const int32_t block_tokens = cache_.layout().block_tokens;
    const int32_t granule = std::max(1, kGraphWidthTokens / block_tokens);
    step.max_blocks_per_seq = std::min((step.max_blocks_per_seq + granule - 1) / granule * granule,
                                       options_.max_blocks_per_seq);
    step.max_kv_len = static_cast<int32_t>(std::min<int64_t>(
        int64_t{step.max_blocks_per_seq} * block_tokens, std::numeric_limits<int32_t>::max()));
  }

  std::vector<int32_t>& staging = context.staging;
  staging.clear();
  const auto append = [&staging](auto begin, auto end) {
    const size_t offset = staging.size();
    staging.insert(staging.end(), begin, end);
    return offset;
  };
  const auto token_range = [first_token, end_token](std::span<const int32_t> values) {
    return values.subspan(static_cast<size_t>(first_token),
                          static_cast<size_t>(end_token - first_token));
  };
  const std::span<const int32_t> tokens_in = token_range(batch.tokens());
  const std::span<const int32_t> positions_in = token_range(batch.positions());
  const size_t tokens = append(tokens_in.begin(), tokens_in.end());
  const size_t positions = append(positions_in.begin(), positions_in.end());
  const size_t kv_lens =
      append(batch.kv_lens().begin() + first_seq, batch.kv_lens().begin() + end_seq);
  const size_t offsets = staging.size();
  for (int32_t s = first_seq; s <= end_seq; ++s) {
    staging.push_back(q_offsets[static_cast<size_t>(s)] - first_token);
  }
  const size_t block_tables = staging.size();
  for (int32_t s = first_seq; s < end_seq; ++s) {
    const std::span<const int32_t> blocks = batch.blocks(s);
    append(blocks.begin(), blocks.end());
    // Positions past a sequence's kv_len are never read.
    staging.resize(staging.size() + static_cast<size_t>(step.max_blocks_per_seq) - blocks.size(),
                   -1);
  }
  const size_t logit_rows = staging.size();
  for (auto row = rows_begin; row != rows_end; ++row) staging.push_back(*row - first_token);

  model_->backend().CopyToDevice(context.scratch.inputs.data(), staging.data(),
                                 staging.size() * sizeof(int32_t));
  const int32_t* device = context.scratch.inputs.as<const int32_t>();
  step.tokens = device + tokens;
  step.positions = device + positions;
  step.kv_lens = device + kv_lens;
  step.q_offsets = device + offsets;
  step.block_tables = device + block_tables;
  step.logit_rows = device + logit_rows;
  context.step = step;
  context.sparse_planned = false;
  context.staged = batch.has_staged();
  if (batch.has_sparse()) PULSE_RETURN_IF_ERROR(PlanSparse(batch, context));
  if (context.staged) {
    std::vector<StagedChunk> chunks;
    for (int32_t s = first_seq; s < end_seq; ++s) {
      const int32_t kv_len = batch.kv_lens()[static_cast<size_t>(s)];
      const int32_t new_tokens =
          q_offsets[static_cast<size_t>(s) + 1] - q_offsets[static_cast<size_t>(s)];
      chunks.push_back({.host_blocks = batch.host_blocks(s),
                        .staging_blocks = batch.blocks(s),
                        .computed = kv_len - new_tokens,
                        .kv_len = kv_len});
    }
    PULSE_RETURN_IF_ERROR(sparse_->staged()->Plan(chunks));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::PlanSparse(const StepBatch& batch, StepContext& context) {
  const int32_t first_seq = context.step.first_seq;
  const int32_t first_token = batch.q_offsets()[static_cast<size_t>(first_seq)];
  std::vector<SparseSequence> sequences;
  int32_t max_host_block = -1;
  for (int32_t s = first_seq; s < first_seq + context.step.num_seqs; ++s) {
    const std::optional<SparseSelection>& sparse = batch.sparse(s);
    const std::span<const int32_t> host = batch.host_blocks(s);
    for (const int32_t block : host) max_host_block = std::max(max_host_block, block);
    sequences.push_back({.first_row = batch.q_offsets()[s] - first_token,
                         .new_tokens = batch.q_offsets()[s + 1] - batch.q_offsets()[s],
                         .kv_len = batch.kv_lens()[s],
                         .blocks = batch.blocks(s),
                         .host_blocks = host,
                         .departed = batch.departed(s),
                         .selection = sparse ? &sparse->options : nullptr,
                         .key = sparse ? sparse->key : 0});
  }
  // The host tier grows to hold what the step writes back (the engine grew it at admission).
  if (max_host_block >= 0) PULSE_RETURN_IF_ERROR(sparse_->host_tier()->Reserve(max_host_block + 1));
  PULSE_RETURN_IF_ERROR(sparse_->Plan(
      sequences, outputs_.counters() + int64_t{first_seq} * kSparseCounters, *context.sparse));
  context.sparse_planned = true;
  return absl::OkStatus();
}

// Each rank holds a part of the vocabulary: the sum of the ranks' rows is the owner's row.
void ModelRunner::Embed(StepContext& context) {
  StepContext::Scratch& scratch = context.scratch;
  const int64_t tokens = context.step.num_tokens;
  model_->backend().Embed(model_->weights().embed.view(), model_->dims().first_vocab_row,
                          context.step.tokens, tokens,
                          static_cast<float*>(PartOf(scratch.delta, scratch.residual)));
  if (ranks_ != nullptr) {
    ranks_->AllReduceSum(scratch.delta.as<float>(), tokens * hidden_, scratch.residual.as<float>());
  }
}

PagedKvBatch ModelRunner::KvBatch(const StepContext& context, int32_t layer) const {
  PagedKvBatch kv;
  kv.blocks = context.staged ? sparse_->staged()->layer_blocks(layer) : cache_.layer(layer);
  kv.layout = cache_.layout();
  kv.num_seqs = context.step.num_seqs;
  kv.max_blocks_per_seq = context.step.max_blocks_per_seq;
  kv.block_tables = context.step.block_tables;
  kv.kv_lens = context.step.kv_lens;
  kv.q_offsets = context.step.q_offsets;
  kv.num_rows = context.step.num_tokens;
  kv.max_q_len = context.step.max_q_len;
  kv.max_kv_len = context.step.max_kv_len;
  return kv;
}

absl::Status ModelRunner::PreAttention(StepContext& context, int32_t layer) {
  Backend& backend = model_->backend();
  const ModelConfig& config = model_->config();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(layer)];
  const int64_t rows = context.step.num_tokens;
  float* residual = context.scratch.residual.as<float>();
  void* normed = context.scratch.normed.data();
  float* qkv = context.scratch.qkv.as<float>();
  // The residual stream absorbs the previous layer's MLP output here (layer 0 has none).
  if (layer == 0) {
    backend.RmsNorm(residual, w.attn_norm.as<float>(), rows, hidden_, config.rms_norm_eps, normed);
  } else {
    backend.AddRmsNorm(residual, context.scratch.delta.as<float>(), w.attn_norm.as<float>(), rows,
                       hidden_, config.rms_norm_eps, normed);
  }
  backend.Gemm(normed, rows, w.qkv.view(), w.qkv_bias.empty() ? nullptr : w.qkv_bias.as<float>(),
               qkv);
  const float* inv_freq = model_->weights().rope_inv_freq.as<float>();
  if (context.staged) PULSE_RETURN_IF_ERROR(sparse_->staged()->BeforeAppend(layer));
  backend.RopeAppendKv(qkv, rows, qkv_dim_, num_heads_, context.step.positions, inv_freq,
                       KvBatch(context, layer));
  if (context.staged) return sparse_->staged()->AfterAppend(layer);
  return context.sparse_planned ? sparse_->AfterAppend(layer, *context.sparse) : absl::OkStatus();
}

absl::Status ModelRunner::Select(StepContext& context, int32_t layer) {
  if (!SparseStepOpen(context) || sparse_->DenseLayer(layer)) return absl::OkStatus();
  return sparse_->Select(layer, *context.sparse, context.scratch.qkv.as<float>(), qkv_dim_);
}

absl::Status ModelRunner::Attend(StepContext& context, int32_t layer) {
  const ModelConfig& config = model_->config();
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  const float* q = context.scratch.qkv.as<float>();
  StepContext::Scratch& scratch = context.scratch;
  void* out = PartOf(scratch.attn_part, scratch.attn);
  const auto row_bytes =
      static_cast<size_t>(q_dim_) * DTypeBytes(model_->backend().activation_type());
  if (SparseStepOpen(context) && !sparse_->DenseLayer(layer)) {
    PULSE_RETURN_IF_ERROR(sparse_->Attend(layer, *context.sparse, q, qkv_dim_, scale, out,
                                          static_cast<int64_t>(row_bytes),
                                          KvBatch(context, layer)));
  } else {
    model_->backend().Attention(q, qkv_dim_, num_heads_, KvBatch(context, layer), scale, out);
  }
  Gather(scratch.attn_part, context.step.num_tokens, row_bytes, scratch.attn);
  return absl::OkStatus();
}

// A rank computes its columns of the O projection and of the MLP's output from the gathered
// inputs, so that every output sums its whole row in one rank's order (tensor-parallel.md).
void ModelRunner::PostAttention(StepContext& context, int32_t layer) {
  Backend& backend = model_->backend();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(layer)];
  const int64_t rows = context.step.num_tokens;
  StepContext::Scratch& scratch = context.scratch;
  auto* delta_part = static_cast<float*>(PartOf(scratch.delta_part, scratch.delta));
  const size_t delta_bytes = static_cast<size_t>(hidden_rows_) * sizeof(float);
  void* normed = scratch.normed.data();
  float* gate_up = scratch.gate_up.as<float>();
  backend.Gemm(scratch.attn.data(), rows, w.o.view(), nullptr, delta_part);
  Gather(scratch.delta_part, rows, delta_bytes, scratch.delta);
  backend.AddRmsNorm(scratch.residual.as<float>(), scratch.delta.as<float>(),
                     w.mlp_norm.as<float>(), rows, hidden_, model_->config().rms_norm_eps, normed);
  backend.Gemm(normed, rows, w.gate_up.view(), nullptr, gate_up);
  backend.SwiGlu(gate_up, rows, inter_, PartOf(scratch.act_part, scratch.act));
  Gather(scratch.act_part, rows,
         static_cast<size_t>(inter_) * DTypeBytes(backend.activation_type()), scratch.act);
  backend.Gemm(scratch.act.data(), rows, w.down.view(), nullptr, delta_part);
  Gather(scratch.delta_part, rows, delta_bytes, scratch.delta);
}

void ModelRunner::Logits() {
  Backend& backend = model_->backend();
  const ModelWeights& weights = model_->weights();
  const size_t row_bytes = static_cast<size_t>(hidden_) * DTypeBytes(backend.activation_type());
  int64_t rows = 0;
  for (StepContext& context : step_contexts()) {
    if (context.step.num_logit_rows == 0) continue;
    void* normed = context.scratch.normed.data();
    backend.AddRmsNorm(context.scratch.residual.as<float>(), context.scratch.delta.as<float>(),
                       weights.final_norm.as<float>(), context.step.num_tokens, hidden_,
                       model_->config().rms_norm_eps, normed);
    backend.GatherRows(normed, hidden_, context.step.logit_rows, context.step.num_logit_rows,
                       outputs_.gathered.as<char>() +
                           static_cast<size_t>(context.step.first_logit_row) * row_bytes);
    rows += context.step.num_logit_rows;
  }
  if (rows == 0) return;
  backend.Gemm(outputs_.gathered.data(), rows, weights.output(), nullptr,
               static_cast<float*>(PartOf(outputs_.logits_part, outputs_.logits)));
  Gather(outputs_.logits_part, rows, static_cast<size_t>(model_->dims().vocab_rows) * sizeof(float),
         outputs_.logits);
}

absl::Status ModelRunner::CopyLogits(std::span<float> logits) {
  const int64_t rows = batch_->num_logit_rows();
  if (static_cast<int64_t>(logits.size()) != rows * vocab_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits: %d values given for %d rows of %d", logits.size(), rows, vocab_));
  }
  return EndStepAfterCounters(
      model_->backend().CopyToHost(logits.data(), outputs_.logits.data(), logits.size_bytes()), 1);
}

absl::Status ModelRunner::EndStepAfterCounters(absl::Status read, int64_t output_reads) {
  if (read.ok() && AnySparseStepOpen()) {
    read = ReadOutputs(0);
    ++output_reads;
  }
  return EndStep(read, output_reads);
}

absl::Status ModelRunner::SampleLogits(std::span<const TokenSampling> sampling,
                                       std::span<const int32_t> penalised_ids,
                                       std::span<int32_t> tokens) {
  const int64_t rows = batch_->num_logit_rows();
  if (static_cast<int64_t>(sampling.size()) != rows ||
      static_cast<int64_t>(tokens.size()) != rows) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling: %d parameters and %d tokens given for %d rows", sampling.size(),
                        tokens.size(), rows));
  }
  for (const TokenSampling& row : sampling) {
    if (row.history_offset < 0 || row.history_count < 0 ||
        static_cast<size_t>(row.history_offset) + static_cast<size_t>(row.history_count) >
            penalised_ids.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sampling: history [%d, +%d) outside the %d penalised ids",
                          row.history_offset, row.history_count, penalised_ids.size()));
    }
  }
  Backend& backend = model_->backend();
  if (outputs_.penalised_ids.bytes() < penalised_ids.size_bytes() ||
      outputs_.penalised_ids.empty()) {
    PULSE_ASSIGN_OR_RETURN(
        outputs_.penalised_ids,
        backend.Allocate(std::max(penalised_ids.size_bytes(), 2 * outputs_.penalised_ids.bytes())));
  }
  backend.CopyToDevice(outputs_.sampling.data(), sampling.data(), sampling.size_bytes());
  backend.CopyToDevice(outputs_.penalised_ids.data(), penalised_ids.data(),
                       penalised_ids.size_bytes());
  backend.SampleTokens(outputs_.logits.as<float>(), rows, vocab_,
                       outputs_.sampling.as<TokenSampling>(), outputs_.penalised_ids.as<int32_t>(),
                       outputs_.tokens());
  const absl::Status read = ReadOutputs(tokens.size_bytes());
  if (read.ok() && !tokens.empty()) {
    std::memcpy(tokens.data(), host_outputs_.data(), tokens.size_bytes());
  }
  return EndStep(read, 1);
}

absl::Status ModelRunner::ReadOutputs(size_t token_bytes) {
  const size_t counter_bytes = AnySparseStepOpen() ? counters_.size() * sizeof(int64_t) : 0;
  const size_t bytes = counter_bytes > 0 ? outputs_.counters_offset + counter_bytes : token_bytes;
  host_outputs_.resize(bytes);
  return model_->backend().CopyToHost(host_outputs_.data(), outputs_.outputs.data(), bytes);
}

std::span<const int64_t> ModelRunner::counters(int32_t first_seq) const {
  const size_t offset =
      outputs_.counters_offset + static_cast<size_t>(first_seq) * kSparseCounters * sizeof(int64_t);
  if (host_outputs_.size() <= offset) return {};
  return {reinterpret_cast<const int64_t*>(host_outputs_.data() + offset),
          (host_outputs_.size() - offset) / sizeof(int64_t)};
}

}  // namespace pulse
