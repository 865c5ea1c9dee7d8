#include "core/model/model.h"

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/expected_tensors.h"

namespace pulse {
namespace {

// Rows [first, first + count) of a tensor of `cols` columns (a vector's elements with cols 1),
// all of them when count < 0.
struct TensorRows {
  std::string name;
  int64_t first = 0;
  int64_t count = -1;
};

// Reads tensors of a checked source through one reusable host buffer and uploads them, so that
// host memory peaks at the largest (fused) tensor.
class WeightUploader {
 public:
  WeightUploader(Backend& backend, const TensorSource& source, DType type, bool keep_blocks)
      : backend_(backend), source_(source), type_(type), keep_blocks_(keep_blocks) {
    for (const TensorInfo& tensor : source.tensors()) elements_[tensor.name] = tensor.elements();
  }

  // The rows `parts` (of tensors [rows_i][cols]) stacked into one matrix: in their blocks when
  // kept so, every one is stored in the same block type and the backend computes on it.
  absl::StatusOr<Weight> Matrix(std::initializer_list<TensorRows> parts, int64_t cols) {
    if (keep_blocks_) {
      PULSE_ASSIGN_OR_RETURN(std::optional<Weight> blocks, Blocks(parts, cols));
      if (blocks.has_value()) return *std::move(blocks);
    }
    PULSE_ASSIGN_OR_RETURN(const std::span<const float> values, Read(parts, cols));
    return backend_.UploadWeight(values, static_cast<int64_t>(values.size()) / cols, cols, type_);
  }

  // The elements `parts` concatenated, as fp32.
  absl::StatusOr<DeviceBuffer> Vector(std::initializer_list<TensorRows> parts) {
    PULSE_ASSIGN_OR_RETURN(const std::span<const float> values, Read(parts, 1));
    return Upload(values);
  }

  absl::StatusOr<DeviceBuffer> Upload(std::span<const float> values) {
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer buffer, backend_.Allocate(values.size_bytes()));
    backend_.CopyToDevice(buffer.data(), values.data(), values.size_bytes());
    return buffer;
  }

 private:
  int64_t Rows(const TensorRows& part, int64_t cols) const {
    return part.count < 0 ? elements_.at(part.name) / cols : part.count;
  }

  // nullopt when a tensor is not in a block type, the types differ or the backend keeps no such
  // weights.
  absl::StatusOr<std::optional<Weight>> Blocks(std::initializer_list<TensorRows> parts,
                                               int64_t cols) {
    std::optional<DType> type;
    block_scratch_.clear();
    int64_t rows = 0;
    for (const TensorRows& part : parts) {
      const size_t before = block_scratch_.size();
      absl::StatusOr<DType> read = source_.ReadBlocks(part.name, block_scratch_);
      if (absl::IsUnimplemented(read.status())) return std::nullopt;
      if (!read.ok()) {
        return absl::Status(read.status().code(),
                            absl::StrCat("reading ", part.name, ": ", read.status().message()));
      }
      if (type.has_value() && *type != *read) return std::nullopt;
      type = *read;
      // Only the part's rows stay.
      const auto row_bytes = static_cast<size_t>(BlockRowBytes(*read, cols));
      const auto first = static_cast<size_t>(part.first);
      const auto count = static_cast<size_t>(Rows(part, cols));
      block_scratch_.resize(before + (first + count) * row_bytes);
      block_scratch_.erase(
          block_scratch_.begin() + static_cast<std::ptrdiff_t>(before),
          block_scratch_.begin() + static_cast<std::ptrdiff_t>(before + first * row_bytes));
      rows += Rows(part, cols);
    }
    absl::StatusOr<Weight> weight = backend_.UploadBlocks(block_scratch_, rows, cols, *type);
    if (absl::IsUnimplemented(weight.status())) return std::nullopt;
    PULSE_RETURN_IF_ERROR(weight.status());
    return std::optional<Weight>(*std::move(weight));
  }

  absl::StatusOr<std::span<const float>> Read(std::initializer_list<TensorRows> parts,
                                              int64_t cols) {
    size_t total = 0;
    for (const TensorRows& part : parts) total += static_cast<size_t>(Rows(part, cols) * cols);
    if (scratch_.size() < total) scratch_.resize(total);
    size_t offset = 0;
    for (const TensorRows& part : parts) {
      const auto elements = static_cast<size_t>(elements_.at(part.name));
      const auto count = static_cast<size_t>(Rows(part, cols) * cols);
      // A whole tensor is read in place, a part through a buffer of its own.
      const bool whole = count == elements;
      if (!whole) tensor_scratch_.resize(elements);
      const std::span<float> into = whole ? std::span<float>(scratch_).subspan(offset, count)
                                          : std::span<float>(tensor_scratch_);
      if (const absl::Status status = source_.Read(part.name, into); !status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat("reading ", part.name, ": ", status.message()));
      }
      if (!whole) {
        const auto first = static_cast<std::ptrdiff_t>(part.first * cols);
        std::copy_n(tensor_scratch_.begin() + first, count,
                    scratch_.begin() + static_cast<std::ptrdiff_t>(offset));
      }
      offset += count;
    }
    return std::span<const float>(scratch_).first(total);
  }

  Backend& backend_;
  const TensorSource& source_;
  const DType type_;
  const bool keep_blocks_;
  // Every tensor the loader reads is in here: CheckTensors ran first.
  absl::flat_hash_map<std::string, int64_t> elements_;
  std::vector<float> scratch_;
  std::vector<float> tensor_scratch_;     // a whole tensor of which a part is read
  std::vector<std::byte> block_scratch_;  // a matrix's blocks, its parts one after another
};

// Rank `rank`'s `rows` rows of tensor `name`: [rows * rank, rows * (rank + 1)).
TensorRows Part(std::string name, int64_t rows, int32_t rank) {
  return {.name = std::move(name), .first = rows * rank, .count = rows};
}

absl::StatusOr<LayerWeights> LoadLayer(WeightUploader& uploader, const ModelConfig& config,
                                       const TensorShard& shard, const ShardDims& dims,
                                       int32_t layer) {
  const std::string prefix = absl::StrCat("model.layers.", layer, ".");
  const std::string attn = prefix + "self_attn.";
  const std::string mlp = prefix + "mlp.";
  const int32_t rank = shard.rank;
  const int64_t q_rows = int64_t{dims.num_heads} * config.head_dim;
  const int64_t kv_rows = int64_t{dims.num_kv_heads} * config.head_dim;
  LayerWeights weights;
  PULSE_ASSIGN_OR_RETURN(weights.attn_norm, uploader.Vector({{prefix + "input_layernorm.weight"}}));
  PULSE_ASSIGN_OR_RETURN(weights.qkv, uploader.Matrix({Part(attn + "q_proj.weight", q_rows, rank),
                                                       Part(attn + "k_proj.weight", kv_rows, rank),
                                                       Part(attn + "v_proj.weight", kv_rows, rank)},
                                                      config.hidden_size));
  if (config.attention_bias) {
    PULSE_ASSIGN_OR_RETURN(weights.qkv_bias,
                           uploader.Vector({Part(attn + "q_proj.bias", q_rows, rank),
                                            Part(attn + "k_proj.bias", kv_rows, rank),
                                            Part(attn + "v_proj.bias", kv_rows, rank)}));
  }
  PULSE_ASSIGN_OR_RETURN(weights.o,
                         uploader.Matrix({Part(attn + "o_proj.weight", dims.hidden_rows, rank)},
                                         int64_t{config.num_heads} * config.head_dim));
  PULSE_ASSIGN_OR_RETURN(weights.mlp_norm,
                         uploader.Vector({{prefix + "post_attention_layernorm.weight"}}));
  PULSE_ASSIGN_OR_RETURN(weights.gate_up,
                         uploader.Matrix({Part(mlp + "gate_proj.weight", dims.intermediate, rank),
                                          Part(mlp + "up_proj.weight", dims.intermediate, rank)},
                                         config.hidden_size));
  PULSE_ASSIGN_OR_RETURN(weights.down,
                         uploader.Matrix({Part(mlp + "down_proj.weight", dims.hidden_rows, rank)},
                                         config.intermediate_size));
  return weights;
}

std::string DominantStoredType(const TensorSource& source) {
  absl::flat_hash_map<std::string, int64_t> elements;
  for (const TensorInfo& tensor : source.tensors()) {
    elements[tensor.stored_type] += tensor.elements();
  }
  std::string dominant;
  int64_t most = -1;
  for (const auto& [type, count] : elements) {
    if (count > most || (count == most && type < dominant)) {
      dominant = type;
      most = count;
    }
  }
  return dominant;
}

}  // namespace

absl::StatusOr<ShardDims> ShardDimsOf(const ModelConfig& config, const TensorShard& shard) {
  const int32_t n = shard.size;
  if (n < 1 || shard.rank < 0 || shard.rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor shard: rank %d of %d ranks", shard.rank, n));
  }
  if (config.num_kv_heads % n != 0 || config.hidden_size % n != 0 ||
      config.intermediate_size % n != 0 || config.vocab_size % n != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor shard: %d ranks must divide the %d KV heads, the hidden size %d, the "
        "intermediate size %d and the vocabulary of %d",
        n, config.num_kv_heads, config.hidden_size, config.intermediate_size, config.vocab_size));
  }
  ShardDims dims{.num_heads = config.num_heads / n,
                 .num_kv_heads = config.num_kv_heads / n,
                 .hidden_rows = config.hidden_size / n,
                 .intermediate = config.intermediate_size / n,
                 .vocab_rows = config.vocab_size / n};
  dims.first_vocab_row = dims.vocab_rows * shard.rank;
  return dims;
}

absl::StatusOr<std::shared_ptr<const Model>> Model::Load(std::shared_ptr<Backend> backend,
                                                         const TensorSource& source,
                                                         const ModelLoadOptions& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("Model::Load: no backend");
  const ModelConfig& config = source.config();
  PULSE_RETURN_IF_ERROR(config.Validate());
  PULSE_RETURN_IF_ERROR(CheckTensors(source));
  PULSE_ASSIGN_OR_RETURN(const ShardDims dims, ShardDimsOf(config, options.shard));

  Model model;
  model.backend_ = std::move(backend);
  model.config_ = config;
  model.shard_ = options.shard;
  model.dims_ = dims;
  model.weight_type_ = options.weight_type;
  model.format_ = std::string(source.format());
  model.stored_type_ = DominantStoredType(source);
  model.metadata_ = source.metadata();

  WeightUploader uploader(*model.backend_, source, options.weight_type, options.keep_blocks);
  ModelWeights& weights = model.weights_;
  PULSE_ASSIGN_OR_RETURN(
      weights.embed,
      uploader.Matrix({Part("model.embed_tokens.weight", dims.vocab_rows, options.shard.rank)},
                      config.hidden_size));
  weights.layers.reserve(static_cast<size_t>(config.num_layers));
  for (int32_t layer = 0; layer < config.num_layers; ++layer) {
    PULSE_ASSIGN_OR_RETURN(LayerWeights layer_weights,
                           LoadLayer(uploader, config, options.shard, dims, layer));
    weights.layers.push_back(std::move(layer_weights));
  }
  PULSE_ASSIGN_OR_RETURN(weights.final_norm, uploader.Vector({{"model.norm.weight"}}));
  if (!config.tie_word_embeddings) {
    PULSE_ASSIGN_OR_RETURN(
        weights.lm_head,
        uploader.Matrix({Part("lm_head.weight", dims.vocab_rows, options.shard.rank)},
                        config.hidden_size));
  }
  PULSE_ASSIGN_OR_RETURN(weights.rope_inv_freq, uploader.Upload(config.RopeInverseFrequencies()));
  model.weights_in_blocks_ = IsBlockType(weights.embed.type) ||
                             IsBlockType(weights.output().type) ||
                             (!weights.layers.empty() && IsBlockType(weights.layers[0].qkv.type));
  return std::make_shared<const Model>(std::move(model));
}

}  // namespace pulse
