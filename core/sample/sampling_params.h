#pragma once

#include <cstdint>
#include <vector>

#include "core/base/status.h"

namespace pulse {

// How the next token is drawn from the logits. temperature == 0 is greedy (argmax, lowest id on
// ties); otherwise repetition penalty, temperature, top-k, top-p and min-p filter in that order
// and a token is drawn with a generator seeded by `seed` (same seed, same tokens).
struct SamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; applied to prompt and generated tokens
  uint64_t seed = 0;
  int32_t max_tokens = 128;
  std::vector<int32_t> stop_token_ids;  // the model's EOS ids are added by the engine
  bool ignore_eos = false;

  absl::Status Validate(int32_t vocab_size) const;
};

}  // namespace pulse
