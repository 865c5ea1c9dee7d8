// Small model configs shared by the format and model tests.
#pragma once

#include "core/format/config.h"

namespace pulse::testing {

// SmolLM2-135M's shapes (the real asset's config).
inline ModelConfig SmolLm2Config() {
  ModelConfig config;
  config.architecture = Architecture::kLlama;
  config.hidden_size = 576;
  config.intermediate_size = 1536;
  config.num_layers = 30;
  config.num_heads = 9;
  config.num_kv_heads = 3;
  config.head_dim = 64;
  config.vocab_size = 49152;
  config.max_position = 8192;
  config.rms_norm_eps = 1e-5f;
  config.rope_theta = 100000.0f;
  config.tie_word_embeddings = true;
  config.bos_token_id = 1;
  config.eos_token_ids = {2};
  return config;
}

// A two-layer model small enough to generate and compare in full.
inline ModelConfig TinyConfig() {
  ModelConfig config;
  config.hidden_size = 16;
  config.intermediate_size = 24;
  config.num_layers = 2;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 4;
  config.vocab_size = 32;
  config.max_position = 128;
  return config;
}

}  // namespace pulse::testing
