// ParseHfConfig: a Hugging Face config.json (LlamaConfig, MistralConfig, Qwen2Config) to a
// ModelConfig, with transformers' defaults for the fields a file leaves out or sets to null.
#include "core/format/hf_config.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "core/format/json_text.h"

namespace pulse {
namespace {

using Json = nlohmann::json;

absl::Status FieldError(std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrFormat("config.json: '%s' %s", field, problem));
}

// Typed reads of one JSON object's fields; a missing or null field is absent.
class Fields {
 public:
  Fields(const Json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  const Json* Find(std::string_view name) const {
    const auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string Name(std::string_view name) const { return absl::StrFormat("%s%s", prefix_, name); }

  absl::StatusOr<int32_t> Int(std::string_view name, std::optional<int32_t> fallback) const {
    const Json* value = Find(name);
    if (value == nullptr) return Fallback(name, fallback);
    return ToInt32(*value, Name(name));
  }
  absl::StatusOr<double> Float(std::string_view name, std::optional<double> fallback) const {
    const Json* value = Find(name);
    if (value == nullptr) return Fallback(name, fallback);
    if (!value->is_number()) return FieldError(Name(name), "is not a number");
    return value->get<double>();
  }
  absl::StatusOr<bool> Bool(std::string_view name, bool fallback) const {
    const Json* value = Find(name);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) return FieldError(Name(name), "is not a boolean");
    return value->get<bool>();
  }
  absl::StatusOr<std::optional<std::string>> String(std::string_view name) const {
    const Json* value = Find(name);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string()) return FieldError(Name(name), "is not a string");
    return value->get<std::string>();
  }

  static absl::StatusOr<int32_t> ToInt32(const Json& value, const std::string& field) {
    if (!value.is_number_integer()) return FieldError(field, "is not an integer");
    if (value.is_number_unsigned()) {
      if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
        return FieldError(field,
                          absl::StrFormat("= %d does not fit in int32", value.get<uint64_t>()));
      }
      return static_cast<int32_t>(value.get<uint64_t>());
    }
    const auto v = value.get<int64_t>();
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return FieldError(field, absl::StrFormat("= %d does not fit in int32", v));
    }
    return static_cast<int32_t>(v);
  }

 private:
  template <typename T>
  absl::StatusOr<T> Fallback(std::string_view name, std::optional<T> fallback) const {
    if (!fallback) return FieldError(Name(name), "is missing");
    return *fallback;
  }

  const Json& object_;
  std::string prefix_;
};

// transformers' defaults where they differ between the families.
struct FamilyDefaults {
  Architecture architecture;
  int32_t max_position;
  std::optional<int32_t> sliding_window;  // when the field is absent
  bool always_attention_bias;
  int32_t bos_token_id;
  int32_t eos_token_id;
};

absl::StatusOr<FamilyDefaults> DetectFamily(const Json& config) {
  std::string name;
  if (const auto it = config.find("model_type"); it != config.end() && it->is_string()) {
    name = it->get<std::string>();
  } else if (const auto arch = config.find("architectures"); arch != config.end() &&
                                                             arch->is_array() && !arch->empty() &&
                                                             arch->front().is_string()) {
    name = arch->front().get<std::string>();
  } else {
    return absl::InvalidArgumentError(
        "config.json: neither 'model_type' nor 'architectures' names the architecture");
  }
  if (name == "llama" || name == "LlamaForCausalLM") {
    return FamilyDefaults{Architecture::kLlama, 2048, std::nullopt, false, 1, 2};
  }
  if (name == "mistral" || name == "MistralForCausalLM") {
    return FamilyDefaults{Architecture::kMistral, 4096 * 32, 4096, false, 1, 2};
  }
  if (name == "qwen2" || name == "Qwen2ForCausalLM") {
    return FamilyDefaults{Architecture::kQwen2, 32768, std::nullopt, true, -1, -1};
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "config.json: unsupported architecture '%s' (supported: llama, mistral, qwen2)", name));
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds
// rope_theta) into `config`.
absl::Status ParseRope(const Json& root, ModelConfig& config) {
  const Fields top(root, "");
  const Json* parameters = top.Find("rope_parameters");
  const Json* scaling = parameters != nullptr ? parameters : top.Find("rope_scaling");
  const std::string group = parameters != nullptr ? "rope_parameters" : "rope_scaling";
  double theta = 10000.0;
  if (parameters != nullptr && parameters->is_object() && parameters->contains("rope_theta")) {
    PULSE_ASSIGN_OR_RETURN(theta, Fields(*parameters, group + ".").Float("rope_theta", 10000.0));
  } else {
    PULSE_ASSIGN_OR_RETURN(theta, top.Float("rope_theta", 10000.0));
  }
  config.rope_theta = static_cast<float>(theta);
  if (scaling == nullptr) return absl::OkStatus();
  if (!scaling->is_object()) return FieldError(group, "is not an object");

  const Fields fields(*scaling, group + ".");
  PULSE_ASSIGN_OR_RETURN(std::optional<std::string> type, fields.String("rope_type"));
  if (!type) {
    PULSE_ASSIGN_OR_RETURN(type, fields.String("type"));
  }
  RopeScaling& out = config.rope_scaling;
  if (!type || *type == "default") {
    out.type = RopeScaling::Type::kNone;
    return absl::OkStatus();
  }
  if (*type != "linear" && *type != "llama3") {
    return FieldError(fields.Name("rope_type"),
                      absl::StrFormat("= '%s' is not supported (default, linear, llama3)", *type));
  }
  PULSE_ASSIGN_OR_RETURN(const double factor, fields.Float("factor", std::nullopt));
  out.factor = static_cast<float>(factor);
  if (*type == "linear") {
    out.type = RopeScaling::Type::kLinear;
    return absl::OkStatus();
  }
  out.type = RopeScaling::Type::kLlama3;
  PULSE_ASSIGN_OR_RETURN(const double low, fields.Float("low_freq_factor", std::nullopt));
  PULSE_ASSIGN_OR_RETURN(const double high, fields.Float("high_freq_factor", std::nullopt));
  out.low_freq_factor = static_cast<float>(low);
  out.high_freq_factor = static_cast<float>(high);
  PULSE_ASSIGN_OR_RETURN(out.original_max_position,
                         fields.Int("original_max_position_embeddings", std::nullopt));
  return absl::OkStatus();
}

// bos_token_id and eos_token_id (an id or a list of ids): a null field means none, an absent
// one the family's default.
absl::Status ParseSpecialTokens(const Json& root, const FamilyDefaults& family,
                                ModelConfig& config) {
  const Fields fields(root, "");
  config.bos_token_id = family.bos_token_id;
  if (root.contains("bos_token_id")) {
    PULSE_ASSIGN_OR_RETURN(config.bos_token_id, fields.Int("bos_token_id", -1));
  }
  if (!root.contains("eos_token_id")) {
    if (family.eos_token_id >= 0) config.eos_token_ids = {family.eos_token_id};
    return absl::OkStatus();
  }
  const Json* eos = fields.Find("eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  if (!eos->is_array()) {
    PULSE_ASSIGN_OR_RETURN(const int32_t id, Fields::ToInt32(*eos, "eos_token_id"));
    config.eos_token_ids = {id};
    return absl::OkStatus();
  }
  for (size_t i = 0; i < eos->size(); ++i) {
    PULSE_ASSIGN_OR_RETURN(const int32_t id,
                           Fields::ToInt32((*eos)[i], absl::StrFormat("eos_token_id[%d]", i)));
    config.eos_token_ids.push_back(id);
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseConfigObject(const Json& root) {
  if (!root.is_object()) return absl::InvalidArgumentError("config.json: not a JSON object");
  PULSE_ASSIGN_OR_RETURN(const FamilyDefaults family, DetectFamily(root));
  const Fields fields(root, "");
  ModelConfig config;
  config.architecture = family.architecture;
  PULSE_ASSIGN_OR_RETURN(config.hidden_size, fields.Int("hidden_size", std::nullopt));
  PULSE_ASSIGN_OR_RETURN(config.intermediate_size, fields.Int("intermediate_size", std::nullopt));
  PULSE_ASSIGN_OR_RETURN(config.num_layers, fields.Int("num_hidden_layers", std::nullopt));
  PULSE_ASSIGN_OR_RETURN(config.num_heads, fields.Int("num_attention_heads", std::nullopt));
  PULSE_ASSIGN_OR_RETURN(config.num_kv_heads, fields.Int("num_key_value_heads", config.num_heads));
  PULSE_ASSIGN_OR_RETURN(config.vocab_size, fields.Int("vocab_size", std::nullopt));
  if (config.num_heads <= 0) return FieldError("num_attention_heads", "must be positive");
  PULSE_ASSIGN_OR_RETURN(config.head_dim,
                         fields.Int("head_dim", config.hidden_size / config.num_heads));
  PULSE_ASSIGN_OR_RETURN(config.max_position,
                         fields.Int("max_position_embeddings", family.max_position));
  PULSE_ASSIGN_OR_RETURN(const double eps, fields.Float("rms_norm_eps", 1e-6));
  config.rms_norm_eps = static_cast<float>(eps);
  PULSE_RETURN_IF_ERROR(ParseRope(root, config));
  PULSE_ASSIGN_OR_RETURN(config.tie_word_embeddings, fields.Bool("tie_word_embeddings", false));
  PULSE_ASSIGN_OR_RETURN(const bool attention_bias, fields.Bool("attention_bias", false));
  config.attention_bias = family.always_attention_bias || attention_bias;
  PULSE_ASSIGN_OR_RETURN(const bool mlp_bias, fields.Bool("mlp_bias", false));
  if (mlp_bias) return FieldError("mlp_bias", "= true is not supported");
  PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> act, fields.String("hidden_act"));
  if (act && *act != "silu") {
    return FieldError("hidden_act", absl::StrFormat("= '%s' is not supported (silu)", *act));
  }
  PULSE_RETURN_IF_ERROR(ParseSpecialTokens(root, family, config));

  // Our attention is full causal. A sliding window shorter than the context would make the
  // reference attend to fewer tokens than we do, so we only claim contexts that fit the window.
  std::optional<int32_t> window = family.sliding_window;
  if (root.contains("sliding_window")) {
    PULSE_ASSIGN_OR_RETURN(const int32_t value, fields.Int("sliding_window", -1));
    window = value >= 0 ? std::optional<int32_t>(value) : std::nullopt;
  }
  if (family.architecture == Architecture::kQwen2) {
    PULSE_ASSIGN_OR_RETURN(const bool use_window, fields.Bool("use_sliding_window", false));
    if (!use_window) window.reset();
  }
  if (window && *window > 0 && *window < config.max_position) config.max_position = *window;

  PULSE_RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view json_text) {
  PULSE_ASSIGN_OR_RETURN(const Json root, ParseJsonText(json_text, "config.json"));
  try {
    return ParseConfigObject(root);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("config.json: %s", e.what()));
  }
}

}  // namespace pulse
