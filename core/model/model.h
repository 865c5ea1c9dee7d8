// A loaded model: config plus weights resident on a backend. Immutable once loaded and shared
// (std::shared_ptr<const Model>) by every engine that runs it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/communicator.h"
#include "core/format/config.h"
#include "core/model/tensor_source.h"

namespace pulse {

struct LayerWeights {
  DeviceBuffer attn_norm;  // fp32 [hidden]
  Weight qkv;              // [q_dim + 2 * kv_dim][hidden]: q rows, then k rows, then v rows
  DeviceBuffer qkv_bias;   // fp32 [q_dim + 2 * kv_dim], empty without attention_bias
  Weight o;                // [hidden][q_dim]
  DeviceBuffer mlp_norm;   // fp32 [hidden]
  Weight gate_up;          // [2 * intermediate][hidden]: gate rows, then up rows
  Weight down;             // [hidden][intermediate]
};

struct ModelWeights {
  Weight embed;                   // [vocab][hidden]
  std::optional<Weight> lm_head;  // [vocab][hidden]; empty when tied to embed
  DeviceBuffer final_norm;        // fp32 [hidden]
  DeviceBuffer rope_inv_freq;     // fp32 [head_dim / 2]
  std::vector<LayerWeights> layers;

  MatrixView output() const { return lm_head ? lm_head->view() : embed.view(); }
};

// One rank's part of a model split over `size` ranks (docs/design/tensor-parallel.md): whole GQA
// groups of KV heads with their query heads, and the matching rows of every matrix, each split by
// its output rows: Q/K/V, gate/up, O, down, and the embedding and output head by vocabulary.
struct TensorShard {
  int32_t rank = 0;
  int32_t size = 1;
};

// The sizes of a shard's part (TensorShard): each the model's divided by the ranks.
struct ShardDims {
  int32_t num_heads = 0;     // query heads
  int32_t num_kv_heads = 0;  // KV heads (its KV cache's)
  int64_t hidden_rows = 0;   // rows of O and down: the hidden columns this rank computes
  int64_t intermediate = 0;  // gate and up rows each
  int64_t vocab_rows = 0;    // rows of the embedding and the output head
  int64_t first_vocab_row = 0;
};

// The sizes of `shard` of a model of `config`: InvalidArgument for a rank outside the shard's
// ranks, or ranks that do not divide the KV heads, the hidden and intermediate sizes and the
// vocabulary.
absl::StatusOr<ShardDims> ShardDimsOf(const ModelConfig& config, const TensorShard& shard);

struct ModelLoadOptions {
  DType weight_type = DType::kBF16;
  // Matrices stored in a block type the backend computes on (Backend::UploadBlocks) stay in
  // their blocks; the others are uploaded as weight_type.
  bool keep_blocks = false;
  // This rank's part of the model; the default is the whole model.
  TensorShard shard = {};
};

class Model {
 public:
  // Validates the config and checks the source's tensors against it (InvalidArgument naming
  // every missing tensor and shape mismatch), then reads them one at a time through one reusable
  // host buffer (peak host memory: the largest fused tensor) and uploads the matrices as
  // options.weight_type (or in their blocks, options.keep_blocks), q/k/v and gate/up fused;
  // norms and RoPE frequencies stay fp32. Of a shard (options.shard), only its rows: then
  // InvalidArgument unless the KV heads, hidden and intermediate sizes and the vocabulary divide
  // by the ranks.
  static absl::StatusOr<std::shared_ptr<const Model>> Load(std::shared_ptr<Backend> backend,
                                                           const TensorSource& source,
                                                           const ModelLoadOptions& options);

  // The whole model's config, whatever the shard.
  const ModelConfig& config() const { return config_; }
  const TensorShard& shard() const { return shard_; }
  const ShardDims& dims() const { return dims_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return *backend_; }
  const std::shared_ptr<Backend>& shared_backend() const { return backend_; }
  DType weight_type() const { return weight_type_; }
  // Whether some matrix stayed in its file's blocks (ModelLoadOptions::keep_blocks).
  bool weights_in_blocks() const { return weights_in_blocks_; }
  std::string_view format() const { return format_; }
  // The source's stored type holding the most weights ("Q4_1", "bf16", "random"...).
  std::string_view stored_type() const { return stored_type_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  Model() = default;

  // Declared first so that it is destroyed last: the weights are its memory.
  std::shared_ptr<Backend> backend_;
  ModelConfig config_;
  TensorShard shard_;
  ShardDims dims_;
  ModelWeights weights_;
  DType weight_type_ = DType::kF32;
  bool weights_in_blocks_ = false;
  std::string format_;
  std::string stored_type_;
  std::map<std::string, std::string> metadata_;
};

// A model over one or more ranks: shard r (Model::shard) on rank r's own backend, and how an
// engine connects its ranks, each engine's runner with a group of communicators of its own.
struct ShardedModel {
  std::vector<std::shared_ptr<const Model>> shards = {};
  // One communicator a rank for the shards' backends (rank r's at r); unused with one shard.
  std::function<absl::StatusOr<std::vector<std::unique_ptr<Communicator>>>()> connect = nullptr;
};

}  // namespace pulse
