// OpenGgufSource: a TensorSource over a GGUF file, translating llama.cpp's metadata keys and
// tensor names to a ModelConfig and Hugging Face names.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "core/format/dequant.h"
#include "core/format/gguf_reader.h"
#include "core/model/file_sources.h"

namespace pulse {
namespace {

// Per-layer GGUF tensor names ("blk.N.<suffix>") and their Hugging Face names
// ("model.layers.N.<suffix>").
constexpr std::pair<std::string_view, std::string_view> kLayerTensors[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

constexpr std::pair<std::string_view, std::string_view> kGlobalTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// llama.cpp's rope_freqs.weight: per-pair frequency divisors (llama3 scaling); goes into the
// config, not the weights.
constexpr std::string_view kRopeFreqsTensor = "rope_freqs.weight";

// Which rows of a tensor llama.cpp's converter interleaved per head.
enum class RowOrder : uint8_t { kHf, kPermutedQ, kPermutedK };

struct MappedTensor {
  const GgufTensorInfo* gguf = nullptr;
  RowOrder order = RowOrder::kHf;
};

// The Hugging Face name of GGUF tensor `name`, or nullopt when it is not a model weight.
std::optional<std::string> HfName(std::string_view name) {
  for (const auto& [gguf, hf] : kGlobalTensors) {
    if (name == gguf) return std::string(hf);
  }
  if (!name.starts_with("blk.")) return std::nullopt;
  name.remove_prefix(4);
  const size_t dot = name.find('.');
  int32_t layer = 0;
  if (dot == std::string_view::npos || std::from_chars(name.data(), name.data() + dot, layer) !=
                                           std::from_chars_result{name.data() + dot, std::errc()}) {
    return std::nullopt;
  }
  const std::string_view suffix = name.substr(dot + 1);
  for (const auto& [gguf, hf] : kLayerTensors) {
    if (suffix == gguf) return absl::StrFormat("model.layers.%d.%s", layer, hf);
  }
  return std::nullopt;
}

absl::StatusOr<int32_t> GetInt32(const GgufFile& file, std::string_view key) {
  PULSE_ASSIGN_OR_RETURN(const int64_t value, file.GetInt(key));
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF '%s': metadata '%s' = %d does not fit in int32", file.path(), key, value));
  }
  return static_cast<int32_t>(value);
}

// Reads the "{arch}.*" keys, with a fallback for the optional ones.
class GgufConfigReader {
 public:
  GgufConfigReader(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string Key(std::string_view suffix) const { return absl::StrFormat("%s.%s", arch_, suffix); }

  absl::StatusOr<int32_t> Int(std::string_view suffix, std::optional<int32_t> fallback) const {
    const std::string key = Key(suffix);
    if (!file_.Has(key) && fallback) return *fallback;
    return GetInt32(file_, key);
  }
  absl::StatusOr<float> Float(std::string_view suffix, std::optional<float> fallback) const {
    const std::string key = Key(suffix);
    if (!file_.Has(key) && fallback) return *fallback;
    PULSE_ASSIGN_OR_RETURN(const double value, file_.GetFloat(key));
    return static_cast<float>(value);
  }

 private:
  const GgufFile& file_;
  std::string arch_;
};

absl::Status ReadRopeScaling(const GgufConfigReader& reader, const GgufFile& file,
                             ModelConfig& config) {
  const std::string type_key = reader.Key("rope.scaling.type");
  if (!file.Has(type_key)) return absl::OkStatus();
  PULSE_ASSIGN_OR_RETURN(const std::string type, file.GetString(type_key));
  if (type == "none") return absl::OkStatus();
  if (type != "linear") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF '%s': %s = '%s' is not supported (none, linear)", file.path(), type_key, type));
  }
  config.rope_scaling.type = RopeScaling::Type::kLinear;
  PULSE_ASSIGN_OR_RETURN(config.rope_scaling.factor, reader.Float("rope.scaling.factor", {}));
  return absl::OkStatus();
}

absl::Status ReadRopeFreqs(const GgufFile& file, ModelConfig& config) {
  const GgufTensorInfo* info = file.FindTensor(kRopeFreqsTensor);
  if (info == nullptr) return absl::OkStatus();
  if (info->type != GgmlType::kF32 || info->ne.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF '%s': %s must be a 1-D F32 tensor", file.path(), kRopeFreqsTensor));
  }
  config.rope_freq_factors.resize(info->elements);
  return Dequantize(info->type, file.TensorData(*info), config.rope_freq_factors);
}

absl::Status ReadSpecialTokens(const GgufFile& file, ModelConfig& config) {
  constexpr std::string_view kBos = "tokenizer.ggml.bos_token_id";
  if (file.Has(kBos)) {
    PULSE_ASSIGN_OR_RETURN(config.bos_token_id, GetInt32(file, kBos));
  }
  // llama.cpp ends generation at any of eos, eot (end of turn) and eom (end of message).
  for (const std::string_view key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                     "tokenizer.ggml.eom_token_id"}) {
    if (!file.Has(key)) continue;
    PULSE_ASSIGN_OR_RETURN(const int32_t id, GetInt32(file, key));
    if (std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), id) ==
        config.eos_token_ids.end()) {
      config.eos_token_ids.push_back(id);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> ReadVocabSize(const GgufConfigReader& reader, const GgufFile& file) {
  if (file.Has(reader.Key("vocab_size"))) return reader.Int("vocab_size", {});
  if (const GgufMetadataEntry* tokens = file.FindMetadata("tokenizer.ggml.tokens");
      tokens != nullptr && tokens->type == GgufValueType::kArray &&
      tokens->count <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return static_cast<int32_t>(tokens->count);
  }
  const GgufTensorInfo* embed = file.FindTensor("token_embd.weight");
  if (embed == nullptr || embed->ne.size() != 2 ||
      embed->ne[1] > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF '%s': no vocab_size, token list or 2-D token_embd.weight", file.path()));
  }
  return static_cast<int32_t>(embed->ne[1]);
}

absl::StatusOr<ModelConfig> ReadConfig(const GgufFile& file) {
  PULSE_ASSIGN_OR_RETURN(const std::string arch, file.GetString("general.architecture"));
  ModelConfig config;
  if (arch == "llama") {
    config.architecture = Architecture::kLlama;
  } else if (arch == "qwen2") {
    config.architecture = Architecture::kQwen2;
    config.attention_bias = true;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF '%s': unsupported architecture '%s' (supported: llama, qwen2)", file.path(), arch));
  }
  const GgufConfigReader reader(file, arch);
  PULSE_ASSIGN_OR_RETURN(config.hidden_size, reader.Int("embedding_length", {}));
  PULSE_ASSIGN_OR_RETURN(config.intermediate_size, reader.Int("feed_forward_length", {}));
  PULSE_ASSIGN_OR_RETURN(config.num_layers, reader.Int("block_count", {}));
  PULSE_ASSIGN_OR_RETURN(config.num_heads, reader.Int("attention.head_count", {}));
  PULSE_ASSIGN_OR_RETURN(config.num_kv_heads,
                         reader.Int("attention.head_count_kv", config.num_heads));
  if (config.num_heads <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("GGUF '%s': %s must be positive", file.path(),
                                                      reader.Key("attention.head_count")));
  }
  PULSE_ASSIGN_OR_RETURN(config.head_dim,
                         reader.Int("attention.key_length", config.hidden_size / config.num_heads));
  PULSE_ASSIGN_OR_RETURN(const int32_t value_dim,
                         reader.Int("attention.value_length", config.head_dim));
  PULSE_ASSIGN_OR_RETURN(const int32_t rope_dim,
                         reader.Int("rope.dimension_count", config.head_dim));
  if (value_dim != config.head_dim || rope_dim != config.head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF '%s': key_length %d, value_length %d and rope.dimension_count %d must be equal",
        file.path(), config.head_dim, value_dim, rope_dim));
  }
  PULSE_ASSIGN_OR_RETURN(config.max_position, reader.Int("context_length", {}));
  PULSE_ASSIGN_OR_RETURN(config.rms_norm_eps, reader.Float("attention.layer_norm_rms_epsilon", {}));
  PULSE_ASSIGN_OR_RETURN(config.rope_theta, reader.Float("rope.freq_base", 10000.0f));
  PULSE_RETURN_IF_ERROR(ReadRopeScaling(reader, file, config));
  PULSE_RETURN_IF_ERROR(ReadRopeFreqs(file, config));
  // Our attention is full causal: only contexts inside a sliding window are exact.
  PULSE_ASSIGN_OR_RETURN(const int32_t window, reader.Int("attention.sliding_window", 0));
  if (window > 0 && window < config.max_position) config.max_position = window;
  PULSE_ASSIGN_OR_RETURN(config.vocab_size, ReadVocabSize(reader, file));
  config.tie_word_embeddings = file.FindTensor("output.weight") == nullptr;
  if (file.FindTensor("blk.0.attn_q.bias") != nullptr) config.attention_bias = true;
  PULSE_RETURN_IF_ERROR(ReadSpecialTokens(file, config));
  const absl::Status valid = config.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF '%s': %s", file.path(), valid.message()));
  }
  return config;
}

// Undoes llama.cpp's q/k row interleaving: within each head of `head_rows` rows, GGUF row 2i + j
// holds Hugging Face row j * head_rows / 2 + i (convert_hf_to_gguf.py's permute()).
void UnpermuteRows(std::span<std::byte> bytes, int64_t rows, int64_t row_bytes, int64_t head_rows) {
  const std::vector<std::byte> gguf(bytes.begin(), bytes.end());
  const int64_t half = head_rows / 2;
  for (int64_t head = 0; head < rows / head_rows; ++head) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t src = head * head_rows + 2 * i + j;
        const int64_t dst = head * head_rows + j * half + i;
        std::memcpy(&bytes[dst * row_bytes], &gguf[src * row_bytes], row_bytes);
      }
    }
  }
}

// The backend type of a GGUF block type that backends may compute on.
std::optional<DType> BlockDType(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
      return DType::kQ8_0;
    case GgmlType::kQ4_0:
      return DType::kQ4_0;
    case GgmlType::kQ4_1:
      return DType::kQ4_1;
    case GgmlType::kQ4_K:
      return DType::kQ4_K;
    case GgmlType::kQ6_K:
      return DType::kQ6_K;
    default:
      return std::nullopt;
  }
}

class GgufSource final : public TensorSource {
 public:
  static absl::StatusOr<std::unique_ptr<TensorSource>> Open(const std::string& path);

  std::string_view format() const override { return "gguf"; }
  const ModelConfig& config() const override { return config_; }
  std::span<const TensorInfo> tensors() const override { return tensors_; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }
  absl::Status Read(std::string_view name, std::span<float> out) const override;
  absl::StatusOr<DType> ReadBlocks(std::string_view name,
                                   std::vector<std::byte>& out) const override;

 private:
  // The tensor `name`, or NotFound.
  absl::StatusOr<const MappedTensor*> Find(std::string_view name) const;
  // Restores the Hugging Face order of a permuted q or k tensor's rows of `row_bytes` bytes.
  absl::Status Unpermute(const MappedTensor& tensor, std::span<std::byte> bytes,
                         int64_t row_bytes) const;

  GgufSource(GgufFile file, ModelConfig config)
      : file_(std::move(file)), config_(std::move(config)) {}
  absl::Status MapTensors();

  GgufFile file_;
  ModelConfig config_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, MappedTensor> by_name_;
  std::map<std::string, std::string> metadata_;
};

absl::StatusOr<std::unique_ptr<TensorSource>> GgufSource::Open(const std::string& path) {
  PULSE_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  PULSE_ASSIGN_OR_RETURN(ModelConfig config, ReadConfig(file));
  auto source = std::unique_ptr<GgufSource>(new GgufSource(std::move(file), std::move(config)));
  PULSE_RETURN_IF_ERROR(source->MapTensors());
  for (const GgufMetadataEntry& entry : source->file_.metadata()) {
    source->metadata_.emplace(std::string(entry.key), source->file_.RenderValue(entry));
  }
  return source;
}

absl::Status GgufSource::MapTensors() {
  // llama.cpp permutes q/k rows for the llama architecture only.
  const bool permuted = config_.architecture == Architecture::kLlama;
  tensors_.reserve(file_.tensors().size());
  for (const GgufTensorInfo& info : file_.tensors()) {
    if (info.name == kRopeFreqsTensor) continue;
    std::optional<std::string> name = HfName(info.name);
    if (!name) {
      return absl::InvalidArgumentError(
          absl::StrFormat("GGUF '%s': unexpected tensor '%s' for a %s model", file_.path(),
                          info.name, ArchitectureName(config_.architecture)));
    }
    MappedTensor mapped{&info, RowOrder::kHf};
    if (permuted && absl::StrContains(*name, "self_attn.q_proj."))
      mapped.order = RowOrder::kPermutedQ;
    if (permuted && absl::StrContains(*name, "self_attn.k_proj."))
      mapped.order = RowOrder::kPermutedK;
    if (mapped.order != RowOrder::kHf && info.ne.size() > 2) {
      return absl::InvalidArgumentError(
          absl::StrFormat("GGUF '%s': tensor '%s' has %d dimensions, expected 1 or 2", file_.path(),
                          info.name, info.ne.size()));
    }
    TensorInfo tensor{*name, std::vector<int64_t>(info.ne.rbegin(), info.ne.rend()),
                      std::string(GgmlTypeName(info.type))};
    by_name_.emplace(*name, mapped);
    tensors_.push_back(std::move(tensor));
  }
  return absl::OkStatus();
}

absl::StatusOr<const MappedTensor*> GgufSource::Find(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrFormat("GGUF '%s' has no tensor '%s'", file_.path(), name));
  }
  return &it->second;
}

absl::Status GgufSource::Unpermute(const MappedTensor& tensor, std::span<std::byte> bytes,
                                   int64_t row_bytes) const {
  if (tensor.order == RowOrder::kHf) return absl::OkStatus();
  const GgufTensorInfo& info = *tensor.gguf;
  const int64_t rows = info.ne.size() == 2 ? info.ne[1] : info.ne[0];
  const int32_t heads =
      tensor.order == RowOrder::kPermutedQ ? config_.num_heads : config_.num_kv_heads;
  if (rows % heads != 0 || (rows / heads) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF '%s': tensor '%s' has %d rows, not an even number per head for %d heads",
        file_.path(), info.name, rows, heads));
  }
  UnpermuteRows(bytes, rows, row_bytes, rows / heads);
  return absl::OkStatus();
}

absl::Status GgufSource::Read(std::string_view name, std::span<float> out) const {
  PULSE_ASSIGN_OR_RETURN(const MappedTensor* tensor, Find(name));
  const GgufTensorInfo& info = *tensor->gguf;
  if (out.size() != static_cast<size_t>(info.elements)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("reading '%s': output holds %d values, the tensor has %d", name, out.size(),
                        info.elements));
  }
  const absl::Status decoded = Dequantize(info.type, file_.TensorData(info), out);
  if (!decoded.ok()) {
    return absl::Status(decoded.code(), absl::StrFormat("reading '%s' (GGUF '%s'): %s", name,
                                                        info.name, decoded.message()));
  }
  const int64_t cols = info.ne.size() == 2 ? info.ne[0] : 1;
  return Unpermute(*tensor, std::as_writable_bytes(out),
                   cols * static_cast<int64_t>(sizeof(float)));
}

absl::StatusOr<DType> GgufSource::ReadBlocks(std::string_view name,
                                             std::vector<std::byte>& out) const {
  PULSE_ASSIGN_OR_RETURN(const MappedTensor* tensor, Find(name));
  const GgufTensorInfo& info = *tensor->gguf;
  const std::optional<DType> type = BlockDType(info.type);
  if (!type.has_value() || info.ne.size() != 2) {
    return absl::UnimplementedError(absl::StrFormat(
        "GGUF '%s': tensor '%s' is %s, not a matrix of a block type backends compute on",
        file_.path(), info.name, GgmlTypeName(info.type)));
  }
  const std::span<const std::byte> data = file_.TensorData(info);
  const size_t start = out.size();
  out.insert(out.end(), data.begin(), data.end());
  const int64_t row_bytes = info.ne[0] / GgmlBlockElements(info.type) * GgmlBlockBytes(info.type);
  PULSE_RETURN_IF_ERROR(Unpermute(*tensor, std::span<std::byte>(out).subspan(start), row_bytes));
  return *type;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorSource>> OpenGgufSource(const std::string& path) {
  return GgufSource::Open(path);
}

}  // namespace pulse
