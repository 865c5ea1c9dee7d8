#include "core/model/model.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/model/expected_tensors.h"

namespace pulse {
namespace {

// Reads tensors of a checked source through one reusable host buffer and uploads them, so that
// host memory peaks at the largest (fused) tensor.
class WeightUploader {
 public:
  WeightUploader(Backend& backend, const TensorSource& source, DType type, bool keep_blocks)
      : backend_(backend), source_(source), type_(type), keep_blocks_(keep_blocks) {
    for (const TensorInfo& tensor : source.tensors()) elements_[tensor.name] = tensor.elements();
  }

  // The tensors `names` (each [rows_i][cols]) stacked row-wise into one matrix: in their blocks
  // when kept so, every one is stored in the same block type and the backend computes on it.
  absl::StatusOr<Weight> Matrix(std::initializer_list<std::string> names, int64_t cols) {
    if (keep_blocks_) {
      PULSE_ASSIGN_OR_RETURN(std::optional<Weight> blocks, Blocks(names, cols));
      if (blocks.has_value()) return *std::move(blocks);
    }
    PULSE_ASSIGN_OR_RETURN(const std::span<const float> values, Read(names));
    return backend_.UploadWeight(values, static_cast<int64_t>(values.size()) / cols, cols, type_);
  }

  // The tensors `names` concatenated, as fp32.
  absl::StatusOr<DeviceBuffer> Vector(std::initializer_list<std::string> names) {
    PULSE_ASSIGN_OR_RETURN(const std::span<const float> values, Read(names));
    return Upload(values);
  }

  absl::StatusOr<DeviceBuffer> Upload(std::span<const float> values) {
    PULSE_ASSIGN_OR_RETURN(DeviceBuffer buffer, backend_.Allocate(values.size_bytes()));
    backend_.CopyToDevice(buffer.data(), values.data(), values.size_bytes());
    return buffer;
  }

 private:
  // nullopt when a tensor is not in a block type, the types differ or the backend keeps no such
  // weights.
  absl::StatusOr<std::optional<Weight>> Blocks(std::initializer_list<std::string> names,
                                               int64_t cols) {
    std::optional<DType> type;
    block_scratch_.clear();
    for (const std::string& name : names) {
      absl::StatusOr<DType> read = source_.ReadBlocks(name, block_scratch_);
      if (absl::IsUnimplemented(read.status())) return std::nullopt;
      if (!read.ok()) {
        return absl::Status(read.status().code(),
                            absl::StrCat("reading ", name, ": ", read.status().message()));
      }
      if (type.has_value() && *type != *read) return std::nullopt;
      type = *read;
    }
    int64_t rows = 0;
    for (const std::string& name : names) rows += elements_.at(name) / cols;
    absl::StatusOr<Weight> weight = backend_.UploadBlocks(block_scratch_, rows, cols, *type);
    if (absl::IsUnimplemented(weight.status())) return std::nullopt;
    PULSE_RETURN_IF_ERROR(weight.status());
    return std::optional<Weight>(*std::move(weight));
  }

  absl::StatusOr<std::span<const float>> Read(std::initializer_list<std::string> names) {
    size_t total = 0;
    for (const std::string& name : names) total += static_cast<size_t>(elements_.at(name));
    if (scratch_.size() < total) scratch_.resize(total);
    size_t offset = 0;
    for (const std::string& name : names) {
      const size_t count = static_cast<size_t>(elements_.at(name));
      const absl::Status status =
          source_.Read(name, std::span<float>(scratch_).subspan(offset, count));
      if (!status.ok()) {
        return absl::Status(status.code(), absl::StrCat("reading ", name, ": ", status.message()));
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
  std::vector<std::byte> block_scratch_;  // a matrix's blocks, its tensors one after another
};

absl::StatusOr<LayerWeights> LoadLayer(WeightUploader& uploader, const ModelConfig& config,
                                       int32_t layer) {
  const std::string prefix = absl::StrCat("model.layers.", layer, ".");
  const std::string attn = prefix + "self_attn.";
  const std::string mlp = prefix + "mlp.";
  LayerWeights weights;
  PULSE_ASSIGN_OR_RETURN(weights.attn_norm, uploader.Vector({prefix + "input_layernorm.weight"}));
  PULSE_ASSIGN_OR_RETURN(
      weights.qkv,
      uploader.Matrix({attn + "q_proj.weight", attn + "k_proj.weight", attn + "v_proj.weight"},
                      config.hidden_size));
  if (config.attention_bias) {
    PULSE_ASSIGN_OR_RETURN(
        weights.qkv_bias,
        uploader.Vector({attn + "q_proj.bias", attn + "k_proj.bias", attn + "v_proj.bias"}));
  }
  PULSE_ASSIGN_OR_RETURN(weights.o, uploader.Matrix({attn + "o_proj.weight"},
                                                    int64_t{config.num_heads} * config.head_dim));
  PULSE_ASSIGN_OR_RETURN(weights.mlp_norm,
                         uploader.Vector({prefix + "post_attention_layernorm.weight"}));
  PULSE_ASSIGN_OR_RETURN(
      weights.gate_up,
      uploader.Matrix({mlp + "gate_proj.weight", mlp + "up_proj.weight"}, config.hidden_size));
  PULSE_ASSIGN_OR_RETURN(weights.down,
                         uploader.Matrix({mlp + "down_proj.weight"}, config.intermediate_size));
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

absl::StatusOr<std::shared_ptr<const Model>> Model::Load(std::shared_ptr<Backend> backend,
                                                         const TensorSource& source,
                                                         const ModelLoadOptions& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("Model::Load: no backend");
  const ModelConfig& config = source.config();
  PULSE_RETURN_IF_ERROR(config.Validate());
  PULSE_RETURN_IF_ERROR(CheckTensors(source));

  Model model;
  model.backend_ = std::move(backend);
  model.config_ = config;
  model.weight_type_ = options.weight_type;
  model.format_ = std::string(source.format());
  model.stored_type_ = DominantStoredType(source);
  model.metadata_ = source.metadata();

  WeightUploader uploader(*model.backend_, source, options.weight_type, options.keep_blocks);
  ModelWeights& weights = model.weights_;
  PULSE_ASSIGN_OR_RETURN(weights.embed,
                         uploader.Matrix({"model.embed_tokens.weight"}, config.hidden_size));
  weights.layers.reserve(static_cast<size_t>(config.num_layers));
  for (int32_t layer = 0; layer < config.num_layers; ++layer) {
    PULSE_ASSIGN_OR_RETURN(LayerWeights layer_weights, LoadLayer(uploader, config, layer));
    weights.layers.push_back(std::move(layer_weights));
  }
  PULSE_ASSIGN_OR_RETURN(weights.final_norm, uploader.Vector({"model.norm.weight"}));
  if (!config.tie_word_embeddings) {
    PULSE_ASSIGN_OR_RETURN(weights.lm_head,
                           uploader.Matrix({"lm_head.weight"}, config.hidden_size));
  }
  PULSE_ASSIGN_OR_RETURN(weights.rope_inv_freq, uploader.Upload(config.RopeInverseFrequencies()));
  model.weights_in_blocks_ = IsBlockType(weights.embed.type) ||
                             IsBlockType(weights.output().type) ||
                             (!weights.layers.empty() && IsBlockType(weights.layers[0].qkv.type));
  return std::make_shared<const Model>(std::move(model));
}

}  // namespace pulse
