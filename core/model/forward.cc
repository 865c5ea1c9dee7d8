#include "core/model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

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

// A decode step graphs may replay: one token a sequence, every sequence dense or every one
// sparse (its attention one run of tables, whose shape the sparse step's plan pads).
bool IsGraphableDecode(int32_t max_q_len, const StepBatch& batch) {
  if (max_q_len != 1) return false;
  int32_t sparse = 0;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) sparse += batch.sparse(s) ? 1 : 0;
  return sparse == 0 || sparse == batch.num_seqs();
}

// Ints of the packed step inputs for the given sizes: tokens and positions [tokens], kv_lens
// [seqs], q_offsets [seqs + 1], block tables [seqs][blocks_per_seq], logit rows [rows].
int64_t InputInts(int64_t tokens, int64_t seqs, int64_t blocks_per_seq, int64_t rows) {
  return 2 * tokens + 2 * seqs + 1 + seqs * blocks_per_seq + rows;
}

}  // namespace

absl::StatusOr<ModelRunner> ModelRunner::Create(std::shared_ptr<const Model> model, KvCache cache,
                                                ModelRunnerOptions options) {
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
  const PagedKvLayout& layout = cache.layout();
  if (cache.num_layers() != config.num_layers || layout.num_kv_heads != config.num_kv_heads ||
      layout.head_dim != config.head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model runner: the KV cache has %d layers x %d heads x %d dims, the model %d x %d x %d",
        cache.num_layers(), layout.num_kv_heads, layout.head_dim, config.num_layers,
        config.num_kv_heads, config.head_dim));
  }
  Backend& backend = model->backend();
  PULSE_RETURN_IF_ERROR(backend.CheckAttention(config.num_heads, layout));
  const int64_t tokens = options.max_step_tokens;
  const int64_t seqs = options.max_seqs;
  const int64_t logit_rows = options.max_logit_rows;
  const int64_t hidden = config.hidden_size;
  const int64_t q_dim = int64_t{config.num_heads} * config.head_dim;
  const int64_t kv_dim = int64_t{config.num_kv_heads} * config.head_dim;
  const int64_t inter = config.intermediate_size;
  StepContext context;
  StepContext::Scratch& scratch = context.scratch;
  PULSE_ASSIGN_OR_RETURN(
      scratch.inputs, backend.Allocate(static_cast<size_t>(InputInts(
                                           tokens, seqs, options.max_blocks_per_seq, logit_rows)) *
                                       sizeof(int32_t)));
  const DType f32 = DType::kF32;
  const DType act = backend.activation_type();
  PULSE_ASSIGN_OR_RETURN(scratch.residual, AllocateArray(backend, tokens * hidden, f32));
  PULSE_ASSIGN_OR_RETURN(scratch.normed, AllocateArray(backend, tokens * hidden, act));
  PULSE_ASSIGN_OR_RETURN(scratch.qkv, AllocateArray(backend, tokens * (q_dim + 2 * kv_dim), f32));
  PULSE_ASSIGN_OR_RETURN(scratch.attn, AllocateArray(backend, tokens * q_dim, act));
  PULSE_ASSIGN_OR_RETURN(scratch.delta, AllocateArray(backend, tokens * hidden, f32));
  PULSE_ASSIGN_OR_RETURN(scratch.gate_up, AllocateArray(backend, tokens * 2 * inter, f32));
  PULSE_ASSIGN_OR_RETURN(scratch.act, AllocateArray(backend, tokens * inter, act));
  PULSE_ASSIGN_OR_RETURN(scratch.gathered, AllocateArray(backend, logit_rows * hidden, act));
  PULSE_ASSIGN_OR_RETURN(scratch.logits,
                         AllocateArray(backend, logit_rows * config.vocab_size, f32));
  PULSE_ASSIGN_OR_RETURN(scratch.sampling,
                         backend.Allocate(static_cast<size_t>(logit_rows) * sizeof(TokenSampling)));
  context.counters_offset = static_cast<size_t>((logit_rows + 1) / 2 * 2) * sizeof(int32_t);
  PULSE_ASSIGN_OR_RETURN(
      scratch.outputs,
      backend.Allocate(context.counters_offset +
                       static_cast<size_t>(seqs * kSparseCounters) * sizeof(int64_t)));
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
                                 .num_heads = config.num_heads}));
    PULSE_ASSIGN_OR_RETURN(context.sparse, sparse->NewStep(context.counters()));
  }
  return ModelRunner(std::move(model), std::move(cache), options, std::move(context),
                     std::move(sparse));
}

ModelRunner::ModelRunner(std::shared_ptr<const Model> model, KvCache cache,
                         const ModelRunnerOptions& options, StepContext context,
                         std::unique_ptr<SparseAttention> sparse)
    : model_(std::move(model)),
      cache_(std::move(cache)),
      options_(options),
      context_(std::move(context)),
      sparse_(std::move(sparse)) {
  const ModelConfig& config = model_->config();
  hidden_ = config.hidden_size;
  q_dim_ = int64_t{config.num_heads} * config.head_dim;
  kv_dim_ = int64_t{config.num_kv_heads} * config.head_dim;
  qkv_dim_ = q_dim_ + 2 * kv_dim_;
  inter_ = config.intermediate_size;
  vocab_ = config.vocab_size;
}

absl::Status ModelRunner::Forward(const StepBatch& batch, std::span<float> logits) {
  PULSE_RETURN_IF_ERROR(Upload(batch));
  if (const absl::Status ran = RunStep(); !ran.ok()) return EndStep(ran, {}, 0);
  return CopyLogits(logits);
}

absl::Status ModelRunner::ForwardAndSample(const StepBatch& batch,
                                           std::span<const TokenSampling> sampling,
                                           std::span<const int32_t> penalised_ids,
                                           std::span<int32_t> tokens) {
  PULSE_RETURN_IF_ERROR(Upload(batch));
  if (const absl::Status ran = RunStep(); !ran.ok()) return EndStep(ran, {}, 0);
  return SampleLogits(sampling, penalised_ids, tokens);
}

absl::Status ModelRunner::RunStep() {
  if (IsGraphableDecode(context_.step.max_q_len, *batch_) && options_.decode_graphs &&
      model_->backend().SupportsGraphs()) {
    PULSE_ASSIGN_OR_RETURN(const bool replayed, ReplayGraph());
    if (replayed) return absl::OkStatus();
  }
  return RunOps();
}

absl::Status ModelRunner::RunOps() {
  Embed();
  PULSE_RETURN_IF_ERROR(RunLayers());
  if (sparse_planned_) PULSE_RETURN_IF_ERROR(sparse_->FinishStep(*context_.sparse));
  Logits();
  return absl::OkStatus();
}

absl::StatusOr<bool> ModelRunner::ReplayGraph() {
  Backend& backend = model_->backend();
  StepShape shape = {context_.step.num_tokens, context_.step.num_seqs, context_.step.num_logit_rows,
                     context_.step.max_blocks_per_seq};
  if (sparse_planned_) {
    const SparseStep::Shape sparse = context_.sparse->shape();
    std::copy(sparse.begin(), sparse.end(), shape.begin() + 4);
  }
  auto found = graphs_.find(shape);
  if (found == graphs_.end()) {
    if (graphs_.size() >= kMaxStepGraphs) {
      graphs_.erase(std::min_element(
          graphs_.begin(), graphs_.end(),
          [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; }));
    }
    found = graphs_.emplace(shape, StepGraphEntry{}).first;
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
  if (entry.capture_failed || !std::exchange(entry.ran, true)) return false;
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
  PULSE_RETURN_IF_ERROR(backend.LaunchGraph(*entry.graph));
  ++graph_stats_.launched;
  return true;
}

absl::Status ModelRunner::RunLayers() {
  for (int32_t layer = 0; layer < model_->config().num_layers; ++layer) {
    PULSE_RETURN_IF_ERROR(PreAttention(layer));
    PULSE_RETURN_IF_ERROR(Attention(layer));
    PostAttention(layer);
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

absl::Status ModelRunner::ForgetSparse(uint64_t key, std::span<const int32_t> host_blocks) {
  if (step_open_) {
    return absl::FailedPreconditionError("ForgetSparse while a step is open");
  }
  return sparse_ == nullptr ? absl::OkStatus() : sparse_->Forget(key, host_blocks);
}

bool ModelRunner::SparseStepOpen() const {
  return sparse_planned_ && sparse_->Attends(*context_.sparse);
}

absl::Status ModelRunner::EndStep(const absl::Status& read, std::span<const int64_t> counters,
                                  int64_t output_reads) {
  if (!step_open_) return read;
  step_open_ = false;
  step_host_waits_ = model_->backend().host_waits() - waits_before_ - output_reads;
  if (!sparse_planned_) return read;
  sparse_planned_ = false;
  if (!read.ok()) {
    sparse_->Abandon(*context_.sparse);
    return read;
  }
  return sparse_->Collect(*context_.sparse, counters);
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

absl::Status ModelRunner::Prepare(const StepBatch& batch) {
  PULSE_RETURN_IF_ERROR(Upload(batch));
  Embed();
  return absl::OkStatus();
}

absl::Status ModelRunner::Upload(const StepBatch& batch) {
  if (step_open_) EndStep(absl::AbortedError("the step was abandoned"), {}, 0).IgnoreError();
  PULSE_RETURN_IF_ERROR(Check(batch));
  StepContext::Inputs step;
  step.num_tokens = batch.num_tokens();
  step.num_seqs = batch.num_seqs();
  step.num_logit_rows = batch.num_logit_rows();
  step.max_blocks_per_seq = batch.max_blocks_per_seq();
  for (int32_t s = 0; s < step.num_seqs; ++s) {
    step.max_q_len = std::max(step.max_q_len, batch.q_offsets()[s + 1] - batch.q_offsets()[s]);
    step.max_kv_len = std::max(step.max_kv_len, batch.kv_lens()[s]);
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

  context_.staging.clear();
  const auto append = [this](std::span<const int32_t> values) {
    const size_t offset = context_.staging.size();
    context_.staging.insert(context_.staging.end(), values.begin(), values.end());
    return offset;
  };
  const size_t tokens = append(batch.tokens());
  const size_t positions = append(batch.positions());
  const size_t kv_lens = append(batch.kv_lens());
  const size_t q_offsets = append(batch.q_offsets());
  const size_t block_tables = context_.staging.size();
  for (int32_t s = 0; s < step.num_seqs; ++s) {
    const std::span<const int32_t> blocks = batch.blocks(s);
    append(blocks);
    // Positions past a sequence's kv_len are never read.
    context_.staging.resize(
        context_.staging.size() + static_cast<size_t>(step.max_blocks_per_seq) - blocks.size(), -1);
  }
  const size_t logit_rows = append(batch.logit_rows());

  Backend& backend = model_->backend();
  backend.CopyToDevice(context_.scratch.inputs.data(), context_.staging.data(),
                       context_.staging.size() * sizeof(int32_t));
  const int32_t* device = context_.scratch.inputs.as<const int32_t>();
  step.tokens = device + tokens;
  step.positions = device + positions;
  step.kv_lens = device + kv_lens;
  step.q_offsets = device + q_offsets;
  step.block_tables = device + block_tables;
  step.logit_rows = device + logit_rows;
  context_.step = step;
  batch_ = &batch;
  waits_before_ = backend.host_waits();
  step_open_ = true;
  if (batch.has_sparse()) PULSE_RETURN_IF_ERROR(PlanSparse(batch));
  return absl::OkStatus();
}

absl::Status ModelRunner::PlanSparse(const StepBatch& batch) {
  std::vector<SparseSequence> sequences;
  int32_t max_host_block = -1;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const std::optional<SparseSelection>& sparse = batch.sparse(s);
    const std::span<const int32_t> host = batch.host_blocks(s);
    for (const int32_t block : host) max_host_block = std::max(max_host_block, block);
    sequences.push_back({.first_row = batch.q_offsets()[s],
                         .new_tokens = batch.q_offsets()[s + 1] - batch.q_offsets()[s],
                         .kv_len = batch.kv_lens()[s],
                         .blocks = batch.blocks(s),
                         .host_blocks = host,
                         .selection = sparse ? &sparse->options : nullptr,
                         .key = sparse ? sparse->key : 0});
  }
  // The host tier grows to hold what the step writes back (the engine grew it at admission).
  if (max_host_block >= 0) PULSE_RETURN_IF_ERROR(sparse_->host_tier()->Reserve(max_host_block + 1));
  PULSE_RETURN_IF_ERROR(sparse_->Plan(sequences, *context_.sparse));
  // The sparse rows count from zero (read back with the step's tokens).
  counters_.assign(static_cast<size_t>(batch.num_seqs()) * kSparseCounters, 0);
  model_->backend().CopyToDevice(context_.counters(), counters_.data(),
                                 counters_.size() * sizeof(int64_t));
  sparse_planned_ = true;
  return absl::OkStatus();
}

void ModelRunner::Embed() {
  model_->backend().Embed(model_->weights().embed.view(), context_.step.tokens,
                          context_.step.num_tokens, context_.scratch.residual.as<float>());
}

PagedKvBatch ModelRunner::KvBatch(int32_t layer) const {
  PagedKvBatch kv;
  kv.blocks = cache_.layer(layer);
  kv.layout = cache_.layout();
  kv.num_seqs = context_.step.num_seqs;
  kv.max_blocks_per_seq = context_.step.max_blocks_per_seq;
  kv.block_tables = context_.step.block_tables;
  kv.kv_lens = context_.step.kv_lens;
  kv.q_offsets = context_.step.q_offsets;
  kv.num_rows = context_.step.num_tokens;
  kv.max_q_len = context_.step.max_q_len;
  kv.max_kv_len = context_.step.max_kv_len;
  return kv;
}

absl::Status ModelRunner::PreAttention(int32_t layer) {
  Backend& backend = model_->backend();
  const ModelConfig& config = model_->config();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(layer)];
  const int64_t rows = context_.step.num_tokens;
  float* residual = context_.scratch.residual.as<float>();
  void* normed = context_.scratch.normed.data();
  float* qkv = context_.scratch.qkv.as<float>();
  // The residual stream absorbs the previous layer's MLP output here (layer 0 has none).
  if (layer == 0) {
    backend.RmsNorm(residual, w.attn_norm.as<float>(), rows, hidden_, config.rms_norm_eps, normed);
  } else {
    backend.AddRmsNorm(residual, context_.scratch.delta.as<float>(), w.attn_norm.as<float>(), rows,
                       hidden_, config.rms_norm_eps, normed);
  }
  backend.Gemm(normed, rows, w.qkv.view(), w.qkv_bias.empty() ? nullptr : w.qkv_bias.as<float>(),
               qkv);
  const float* inv_freq = model_->weights().rope_inv_freq.as<float>();
  backend.RopeAppendKv(qkv, rows, qkv_dim_, config.num_heads, context_.step.positions, inv_freq,
                       KvBatch(layer));
  return sparse_planned_ ? sparse_->AfterAppend(layer, *context_.sparse) : absl::OkStatus();
}

absl::Status ModelRunner::Attention(int32_t layer) {
  const ModelConfig& config = model_->config();
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  if (SparseStepOpen()) {
    const auto row_bytes =
        static_cast<int64_t>(q_dim_ * DTypeBytes(model_->backend().activation_type()));
    const float* q = context_.scratch.qkv.as<float>();
    PULSE_RETURN_IF_ERROR(sparse_->Select(layer, *context_.sparse, q, qkv_dim_));
    return sparse_->Attend(layer, *context_.sparse, q, qkv_dim_, scale,
                           context_.scratch.attn.data(), row_bytes, KvBatch(layer));
  }
  model_->backend().Attention(context_.scratch.qkv.as<float>(), qkv_dim_, config.num_heads,
                              KvBatch(layer), scale, context_.scratch.attn.data());
  return absl::OkStatus();
}

void ModelRunner::PostAttention(int32_t layer) {
  Backend& backend = model_->backend();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(layer)];
  const int64_t rows = context_.step.num_tokens;
  float* delta = context_.scratch.delta.as<float>();
  void* normed = context_.scratch.normed.data();
  float* gate_up = context_.scratch.gate_up.as<float>();
  void* act = context_.scratch.act.data();
  backend.Gemm(context_.scratch.attn.data(), rows, w.o.view(), nullptr, delta);
  backend.AddRmsNorm(context_.scratch.residual.as<float>(), delta, w.mlp_norm.as<float>(), rows,
                     hidden_, model_->config().rms_norm_eps, normed);
  backend.Gemm(normed, rows, w.gate_up.view(), nullptr, gate_up);
  backend.SwiGlu(gate_up, rows, inter_, act);
  backend.Gemm(act, rows, w.down.view(), nullptr, delta);
}

void ModelRunner::Logits() {
  const int64_t rows = context_.step.num_logit_rows;
  if (rows == 0) return;
  Backend& backend = model_->backend();
  const ModelWeights& weights = model_->weights();
  void* normed = context_.scratch.normed.data();
  backend.AddRmsNorm(context_.scratch.residual.as<float>(), context_.scratch.delta.as<float>(),
                     weights.final_norm.as<float>(), context_.step.num_tokens, hidden_,
                     model_->config().rms_norm_eps, normed);
  backend.GatherRows(normed, hidden_, context_.step.logit_rows, rows,
                     context_.scratch.gathered.data());
  backend.Gemm(context_.scratch.gathered.data(), rows, weights.output(), nullptr,
               context_.scratch.logits.as<float>());
}

absl::Status ModelRunner::CopyLogits(std::span<float> logits) {
  const int64_t rows = context_.step.num_logit_rows;
  if (static_cast<int64_t>(logits.size()) != rows * vocab_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits: %d values given for %d rows of %d", logits.size(), rows, vocab_));
  }
  absl::Status read = model_->backend().CopyToHost(logits.data(), context_.scratch.logits.data(),
                                                   logits.size_bytes());
  int64_t reads = 1;
  if (read.ok() && SparseStepOpen()) {
    read = ReadOutputs(0);
    ++reads;
  }
  return EndStep(read, counters(), reads);
}

absl::Status ModelRunner::SampleLogits(std::span<const TokenSampling> sampling,
                                       std::span<const int32_t> penalised_ids,
                                       std::span<int32_t> tokens) {
  const int64_t rows = context_.step.num_logit_rows;
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
  StepContext::Scratch& scratch = context_.scratch;
  if (scratch.penalised_ids.bytes() < penalised_ids.size_bytes() || scratch.penalised_ids.empty()) {
    PULSE_ASSIGN_OR_RETURN(
        scratch.penalised_ids,
        backend.Allocate(std::max(penalised_ids.size_bytes(), 2 * scratch.penalised_ids.bytes())));
  }
  backend.CopyToDevice(scratch.sampling.data(), sampling.data(), sampling.size_bytes());
  backend.CopyToDevice(scratch.penalised_ids.data(), penalised_ids.data(),
                       penalised_ids.size_bytes());
  backend.SampleTokens(scratch.logits.as<float>(), rows, vocab_,
                       scratch.sampling.as<TokenSampling>(), scratch.penalised_ids.as<int32_t>(),
                       context_.tokens());
  const absl::Status read = ReadOutputs(tokens.size_bytes());
  if (read.ok() && !tokens.empty()) {
    std::memcpy(tokens.data(), outputs_.data(), tokens.size_bytes());
  }
  return EndStep(read, counters(), 1);
}

absl::Status ModelRunner::ReadOutputs(size_t token_bytes) {
  const size_t counter_bytes = SparseStepOpen() ? counters_.size() * sizeof(int64_t) : size_t{0};
  const size_t bytes = counter_bytes > 0 ? context_.counters_offset + counter_bytes : token_bytes;
  outputs_.resize(bytes);
  return model_->backend().CopyToHost(outputs_.data(), context_.scratch.outputs.data(), bytes);
}

std::span<const int64_t> ModelRunner::counters() const {
  if (outputs_.size() <= context_.counters_offset) return {};
  return {reinterpret_cast<const int64_t*>(outputs_.data() + context_.counters_offset),
          (outputs_.size() - context_.counters_offset) / sizeof(int64_t)};
}

}  // namespace pulse
