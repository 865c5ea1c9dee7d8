// The hyper-parameters of a Llama-family decoder, whichever file format they came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace pulse {

enum class Architecture : uint8_t { kLlama, kMistral, kQwen2 };

std::string_view ArchitectureName(Architecture arch);

struct RopeScaling {
  enum class Type : uint8_t { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t vocab_size = 0;
  int32_t max_position = 0;  // the context length the model was trained for
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;

  // Checks that every size is positive and consistent (heads divide, head_dim even...).
  absl::Status Validate() const;
  // Number of weights (tied embeddings counted once).
  int64_t ParameterCount() const;
  // Per-pair inverse frequencies [head_dim / 2] with rope_scaling applied.
  std::vector<float> RopeInverseFrequencies() const;
};

}  // namespace pulse
