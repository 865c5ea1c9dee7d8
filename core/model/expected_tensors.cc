#include "core/model/expected_tensors.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pulse {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

std::vector<TensorInfo> ExpectedTensors(const ModelConfig& config) {
  const int64_t hidden = config.hidden_size;
  const int64_t q_dim = int64_t{config.num_heads} * config.head_dim;
  const int64_t kv_dim = int64_t{config.num_kv_heads} * config.head_dim;
  const int64_t inter = config.intermediate_size;
  const int64_t vocab = config.vocab_size;

  std::vector<TensorInfo> tensors;
  tensors.reserve(3 + static_cast<size_t>(config.num_layers) * 12);
  const auto add = [&tensors](std::string name, std::vector<int64_t> shape) {
    tensors.push_back({std::move(name), std::move(shape), ""});
  };
  add("model.embed_tokens.weight", {vocab, hidden});
  for (int32_t layer = 0; layer < config.num_layers; ++layer) {
    const std::string prefix = absl::StrCat("model.layers.", layer, ".");
    add(prefix + "input_layernorm.weight", {hidden});
    add(prefix + "self_attn.q_proj.weight", {q_dim, hidden});
    add(prefix + "self_attn.k_proj.weight", {kv_dim, hidden});
    add(prefix + "self_attn.v_proj.weight", {kv_dim, hidden});
    if (config.attention_bias) {
      add(prefix + "self_attn.q_proj.bias", {q_dim});
      add(prefix + "self_attn.k_proj.bias", {kv_dim});
      add(prefix + "self_attn.v_proj.bias", {kv_dim});
    }
    add(prefix + "self_attn.o_proj.weight", {hidden, q_dim});
    add(prefix + "post_attention_layernorm.weight", {hidden});
    add(prefix + "mlp.gate_proj.weight", {inter, hidden});
    add(prefix + "mlp.up_proj.weight", {inter, hidden});
    add(prefix + "mlp.down_proj.weight", {hidden, inter});
  }
  add("model.norm.weight", {hidden});
  if (!config.tie_word_embeddings) add("lm_head.weight", {vocab, hidden});
  return tensors;
}

int64_t ParameterCount(const ModelConfig& config) {
  int64_t count = 0;
  for (const TensorInfo& tensor : ExpectedTensors(config)) count += tensor.elements();
  return count;
}

absl::Status CheckTensors(const TensorSource& source) {
  absl::flat_hash_map<std::string_view, const TensorInfo*> present;
  for (const TensorInfo& tensor : source.tensors()) present[tensor.name] = &tensor;

  std::vector<std::string> problems;
  for (const TensorInfo& expected : ExpectedTensors(source.config())) {
    const auto it = present.find(expected.name);
    if (it == present.end()) {
      problems.push_back(absl::StrCat(expected.name, " is missing"));
    } else if (it->second->shape != expected.shape) {
      problems.push_back(absl::StrCat(expected.name, " has shape ", ShapeText(it->second->shape),
                                      ", expected ", ShapeText(expected.shape)));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s weights do not match the %s config: %s", source.format(),
      ArchitectureName(source.config().architecture), absl::StrJoin(problems, "; ")));
}

}  // namespace pulse
