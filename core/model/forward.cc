#include "core/model/forward.h"

#include <algorithm>
#include <cmath>
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

// A decode step graphs may replay: one token a sequence, every sequence dense.
bool IsDenseDecode(int32_t max_q_len, const StepBatch& batch) {
  return max_q_len == 1 && !batch.has_sparse();
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
  Scratch scratch;
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
  PULSE_ASSIGN_OR_RETURN(scratch.tokens,
                         backend.Allocate(static_cast<size_t>(logit_rows) * sizeof(int32_t)));
  std::unique_ptr<OffloadedKv> offloaded;
  if (options.offload) {
    if (options.offload->slot_blocks <= 0 || options.offload->slot_blocks >= cache.num_blocks()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model runner: %d device slots of a KV cache of %d blocks (the rest is the dense pool)",
          options.offload->slot_blocks, cache.num_blocks()));
    }
    PULSE_ASSIGN_OR_RETURN(
        offloaded,
        OffloadedKv::Create(backend, cache, cache.num_blocks() - options.offload->slot_blocks,
                            *options.offload));
  }
  ModelRunner runner(std::move(model), std::move(cache), options, std::move(scratch));
  runner.offloaded_ = std::move(offloaded);
  return runner;
}

ModelRunner::ModelRunner(std::shared_ptr<const Model> model, KvCache cache,
                         const ModelRunnerOptions& options, Scratch scratch)
    : model_(std::move(model)),
      cache_(std::move(cache)),
      options_(options),
      scratch_(std::move(scratch)) {
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
  PULSE_RETURN_IF_ERROR(RunStep());
  return CopyLogits(logits);
}

absl::Status ModelRunner::ForwardAndSample(const StepBatch& batch,
                                           std::span<const TokenSampling> sampling,
                                           std::span<const int32_t> penalised_ids,
                                           std::span<int32_t> tokens) {
  PULSE_RETURN_IF_ERROR(Upload(batch));
  PULSE_RETURN_IF_ERROR(RunStep());
  return SampleLogits(sampling, penalised_ids, tokens);
}

absl::Status ModelRunner::RunStep() {
  if (IsDenseDecode(step_.max_q_len, *batch_) && options_.decode_graphs &&
      model_->backend().SupportsGraphs()) {
    PULSE_ASSIGN_OR_RETURN(const bool replayed, ReplayGraph());
    if (replayed) return absl::OkStatus();
  }
  Embed();
  PULSE_RETURN_IF_ERROR(RunLayers());
  Logits();
  return absl::OkStatus();
}

absl::StatusOr<bool> ModelRunner::ReplayGraph() {
  Backend& backend = model_->backend();
  const StepShape shape = {step_.num_tokens, step_.num_seqs, step_.num_logit_rows,
                           step_.max_blocks_per_seq};
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
  Embed();
  const absl::Status layers = RunLayers();
  Logits();
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend.EndCapture();
  if (!layers.ok() || !graph.ok()) {
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
  return offloaded_ == nullptr ? OffloadStats{} : offloaded_->stats();
}

CacheStats ModelRunner::offload_stats(uint64_t key) const {
  return offloaded_ == nullptr ? CacheStats{} : offloaded_->stats(key);
}

CacheStats ModelRunner::offload_stats(uint64_t key, int32_t layer) const {
  return offloaded_ == nullptr ? CacheStats{} : offloaded_->layer_stats(key, layer);
}

absl::Status ModelRunner::ForgetSparse(uint64_t key) {
  if (sparse_ != nullptr) sparse_->Forget(key);
  return offloaded_ == nullptr ? absl::OkStatus() : offloaded_->Forget(key);
}

absl::Status ModelRunner::EndStep() {
  if (!step_open_) return absl::OkStatus();
  step_open_ = false;
  return offloaded_ == nullptr ? absl::OkStatus() : offloaded_->EndStep();
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
    // Blocks past the dense pool are the offloaded KV's slots.
    const int32_t dense_blocks =
        offloaded_ == nullptr ? cache_.num_blocks() : offloaded_->first_slot();
    const std::span<const int32_t> host = batch.host_blocks(s);
    const bool offloaded = !host.empty();
    if (offloaded && (!batch.sparse(s) || offloaded_ == nullptr || host.size() != blocks.size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("step batch: sequence %d has %d host blocks for %d blocks%s", s,
                          host.size(), blocks.size(),
                          !batch.sparse(s)        ? ", without a sparse selection"
                          : offloaded_ == nullptr ? ", and the runner has no host tier"
                                                  : ""));
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
      if (offloaded && (host[j] < 0 || host[j] >= offloaded_->options().host_blocks)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("step batch: sequence %d uses host block %d of %d as its block %d", s,
                            host[j], offloaded_->options().host_blocks, j));
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
  PULSE_RETURN_IF_ERROR(EndStep());
  PULSE_RETURN_IF_ERROR(Check(batch));
  StepInputs step;
  step.num_tokens = batch.num_tokens();
  step.num_seqs = batch.num_seqs();
  step.num_logit_rows = batch.num_logit_rows();
  step.max_blocks_per_seq = batch.max_blocks_per_seq();
  for (int32_t s = 0; s < step.num_seqs; ++s) {
    step.max_q_len = std::max(step.max_q_len, batch.q_offsets()[s + 1] - batch.q_offsets()[s]);
    step.max_kv_len = std::max(step.max_kv_len, batch.kv_lens()[s]);
  }
  // A dense decode step's shapes move in steps of kGraphWidthTokens (graphs or not, so that a
  // replayed graph computes exactly what the ops would): the attention kernels size their
  // launches by max_kv_len and read the true lengths.
  if (IsDenseDecode(step.max_q_len, batch)) {
    const int32_t block_tokens = cache_.layout().block_tokens;
    const int32_t granule = std::max(1, kGraphWidthTokens / block_tokens);
    step.max_blocks_per_seq = std::min((step.max_blocks_per_seq + granule - 1) / granule * granule,
                                       options_.max_blocks_per_seq);
    step.max_kv_len = static_cast<int32_t>(std::min<int64_t>(
        int64_t{step.max_blocks_per_seq} * block_tokens, std::numeric_limits<int32_t>::max()));
  }

  staging_.clear();
  const auto append = [this](std::span<const int32_t> values) {
    const size_t offset = staging_.size();
    staging_.insert(staging_.end(), values.begin(), values.end());
    return offset;
  };
  const size_t tokens = append(batch.tokens());
  const size_t positions = append(batch.positions());
  const size_t kv_lens = append(batch.kv_lens());
  const size_t q_offsets = append(batch.q_offsets());
  const size_t block_tables = staging_.size();
  for (int32_t s = 0; s < step.num_seqs; ++s) {
    const std::span<const int32_t> blocks = batch.blocks(s);
    append(blocks);
    // Positions past a sequence's kv_len are never read.
    staging_.resize(staging_.size() + static_cast<size_t>(step.max_blocks_per_seq) - blocks.size(),
                    -1);
  }
  const size_t logit_rows = append(batch.logit_rows());

  Backend& backend = model_->backend();
  backend.CopyToDevice(scratch_.inputs.data(), staging_.data(), staging_.size() * sizeof(int32_t));
  const int32_t* device = scratch_.inputs.as<const int32_t>();
  step.tokens = device + tokens;
  step.positions = device + positions;
  step.kv_lens = device + kv_lens;
  step.q_offsets = device + q_offsets;
  step.block_tables = device + block_tables;
  step.logit_rows = device + logit_rows;
  step_ = step;

  batch_ = &batch;
  if (batch.has_sparse()) {
    if (sparse_ == nullptr) {
      PULSE_ASSIGN_OR_RETURN(
          sparse_, SparseAttention::Create(backend, cache_.layout(), cache_.num_layers(),
                                           cache_.num_blocks(), model_->config().num_heads,
                                           options_.max_seqs, options_.max_blocks_per_seq,
                                           options_.summary_radius, offloaded_.get()));
    }
    PULSE_RETURN_IF_ERROR(sparse_->Prepare(batch));
  }
  step_open_ = true;
  return absl::OkStatus();
}

void ModelRunner::Embed() {
  model_->backend().Embed(model_->weights().embed.view(), step_.tokens, step_.num_tokens,
                          scratch_.residual.as<float>());
}

PagedKvBatch ModelRunner::KvBatch(int32_t layer) const {
  PagedKvBatch kv;
  kv.blocks = cache_.layer(layer);
  kv.layout = cache_.layout();
  kv.num_seqs = step_.num_seqs;
  kv.max_blocks_per_seq = step_.max_blocks_per_seq;
  kv.block_tables = step_.block_tables;
  kv.kv_lens = step_.kv_lens;
  kv.q_offsets = step_.q_offsets;
  kv.num_rows = step_.num_tokens;
  kv.max_q_len = step_.max_q_len;
  kv.max_kv_len = step_.max_kv_len;
  return kv;
}

absl::Status ModelRunner::PreAttention(int32_t layer) {
  Backend& backend = model_->backend();
  const ModelConfig& config = model_->config();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(layer)];
  const int64_t rows = step_.num_tokens;
  float* residual = scratch_.residual.as<float>();
  void* normed = scratch_.normed.data();
  float* qkv = scratch_.qkv.as<float>();
  // The residual stream absorbs the previous layer's MLP output here (layer 0 has none).
  if (layer == 0) {
    backend.RmsNorm(residual, w.attn_norm.as<float>(), rows, hidden_, config.rms_norm_eps, normed);
  } else {
    backend.AddRmsNorm(residual, scratch_.delta.as<float>(), w.attn_norm.as<float>(), rows, hidden_,
                       config.rms_norm_eps, normed);
  }
  backend.Gemm(normed, rows, w.qkv.view(), w.qkv_bias.empty() ? nullptr : w.qkv_bias.as<float>(),
               qkv);
  const float* inv_freq = model_->weights().rope_inv_freq.as<float>();
  backend.RopeAppendKv(qkv, rows, qkv_dim_, config.num_heads, step_.positions, inv_freq,
                       KvBatch(layer));
  return batch_->has_sparse() ? sparse_->Summarize(layer, cache_.layer(layer)) : absl::OkStatus();
}

absl::Status ModelRunner::Attention(int32_t layer) {
  const ModelConfig& config = model_->config();
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  if (batch_->has_sparse() && sparse_->Applies(*batch_)) {
    const auto row_bytes =
        static_cast<int64_t>(q_dim_ * DTypeBytes(model_->backend().activation_type()));
    return sparse_->Attend(layer, *batch_, cache_.layer(layer), scratch_.qkv.as<float>(), qkv_dim_,
                           scale, scratch_.attn.data(), row_bytes);
  }
  model_->backend().Attention(scratch_.qkv.as<float>(), qkv_dim_, config.num_heads, KvBatch(layer),
                              scale, scratch_.attn.data());
  return absl::OkStatus();
}

void ModelRunner::PostAttention(int32_t layer) {
  Backend& backend = model_->backend();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(layer)];
  const int64_t rows = step_.num_tokens;
  float* delta = scratch_.delta.as<float>();
  void* normed = scratch_.normed.data();
  float* gate_up = scratch_.gate_up.as<float>();
  void* act = scratch_.act.data();
  backend.Gemm(scratch_.attn.data(), rows, w.o.view(), nullptr, delta);
  backend.AddRmsNorm(scratch_.residual.as<float>(), delta, w.mlp_norm.as<float>(), rows, hidden_,
                     model_->config().rms_norm_eps, normed);
  backend.Gemm(normed, rows, w.gate_up.view(), nullptr, gate_up);
  backend.SwiGlu(gate_up, rows, inter_, act);
  backend.Gemm(act, rows, w.down.view(), nullptr, delta);
}

void ModelRunner::Logits() {
  const int64_t rows = step_.num_logit_rows;
  if (rows == 0) return;
  Backend& backend = model_->backend();
  const ModelWeights& weights = model_->weights();
  void* normed = scratch_.normed.data();
  backend.AddRmsNorm(scratch_.residual.as<float>(), scratch_.delta.as<float>(),
                     weights.final_norm.as<float>(), step_.num_tokens, hidden_,
                     model_->config().rms_norm_eps, normed);
  backend.GatherRows(normed, hidden_, step_.logit_rows, rows, scratch_.gathered.data());
  backend.Gemm(scratch_.gathered.data(), rows, weights.output(), nullptr,
               scratch_.logits.as<float>());
}

absl::Status ModelRunner::CopyLogits(std::span<float> logits) {
  const int64_t rows = step_.num_logit_rows;
  if (static_cast<int64_t>(logits.size()) != rows * vocab_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits: %d values given for %d rows of %d", logits.size(), rows, vocab_));
  }
  const absl::Status copied =
      model_->backend().CopyToHost(logits.data(), scratch_.logits.data(), logits.size_bytes());
  const absl::Status ended = EndStep();
  return copied.ok() ? ended : copied;
}

absl::Status ModelRunner::SampleLogits(std::span<const TokenSampling> sampling,
                                       std::span<const int32_t> penalised_ids,
                                       std::span<int32_t> tokens) {
  const int64_t rows = step_.num_logit_rows;
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
  if (penalised_ids_.bytes() < penalised_ids.size_bytes() || penalised_ids_.empty()) {
    PULSE_ASSIGN_OR_RETURN(penalised_ids_, backend.Allocate(std::max(penalised_ids.size_bytes(),
                                                                     2 * penalised_ids_.bytes())));
  }
  backend.CopyToDevice(scratch_.sampling.data(), sampling.data(), sampling.size_bytes());
  backend.CopyToDevice(penalised_ids_.data(), penalised_ids.data(), penalised_ids.size_bytes());
  backend.SampleTokens(scratch_.logits.as<float>(), rows, vocab_,
                       scratch_.sampling.as<TokenSampling>(), penalised_ids_.as<int32_t>(),
                       scratch_.tokens.as<int32_t>());
  const absl::Status copied =
      backend.CopyToHost(tokens.data(), scratch_.tokens.data(), tokens.size_bytes());
  const absl::Status ended = EndStep();
  return copied.ok() ? ended : copied;
}

}  // namespace pulse
