// The tensors a Llama-family model of a given config must have, in Hugging Face names and shapes,
// and a check of a TensorSource against them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "core/format/config.h"
#include "core/model/tensor_source.h"

namespace pulse {

// Canonical tensors of `config`, in a stable order: model.embed_tokens.weight, then per layer
// input_layernorm, q/k/v_proj (+ .bias when attention_bias), o_proj, post_attention_layernorm,
// mlp gate/up/down_proj; then model.norm.weight and lm_head.weight unless tie_word_embeddings.
// stored_type is left empty.
std::vector<TensorInfo> ExpectedTensors(const ModelConfig& config);

// Number of weights of `config`: the elements of ExpectedTensors (tied embeddings counted once).
int64_t ParameterCount(const ModelConfig& config);

// OK when `source` has every tensor of ExpectedTensors(source.config()) with the expected shape;
// otherwise InvalidArgument listing every missing tensor and every shape mismatch (both shapes).
// Tensors the config does not expect are allowed (and ignored by the loader).
absl::Status CheckTensors(const TensorSource& source);

}  // namespace pulse
