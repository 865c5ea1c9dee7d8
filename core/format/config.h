// The hyper-parameters of a Llama-family decoder, whichever file format they came from.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace pulse {

enum class Architecture : uint8_t { kLlama, kMistral, kQwen2 };

// "llama", "mistral", "qwen2".
std::string_view ArchitectureName(Architecture arch);

// Hugging Face's rope_scaling: "linear" divides every inverse frequency by `factor`; "llama3"
// divides the low frequencies by `factor` and interpolates smoothly between low_freq_factor and
// high_freq_factor (transformers' _compute_llama3_parameters).
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
  // The longest context the model supports: the trained context length, or the sliding
  // window when it is shorter (our attention is full causal, exact only inside the window).
  int32_t max_position = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling = {};
  // Per-pair divisors of the inverse frequencies [head_dim / 2], or empty: a GGUF file's
  // rope_freqs.weight tensor (how llama.cpp stores llama3 scaling).
  std::vector<float> rope_freq_factors = {};
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids = {};

  // Checks that every size is positive, bounded and consistent (heads divide, head_dim even,
  // token ids inside the vocabulary...); InvalidArgument naming the field otherwise.
  absl::Status Validate() const;
  // Per-pair inverse frequencies [head_dim / 2]: 1 / theta^(2i / head_dim), with rope_scaling
  // and rope_freq_factors applied. Computed in double, rounded to float once.
  std::vector<float> RopeInverseFrequencies() const;
};

}  // namespace pulse
