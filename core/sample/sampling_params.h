#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace pulse {

// How the next token is drawn from the logits, in Hugging Face's order: the repetition penalty
// (over the prompt and generated ids: logit > 0 ? logit / p : logit * p), then, when
// temperature > 0, temperature, top-k, top-p, min-p, and a draw from the renormalised
// distribution with a generator seeded by `seed` (same seed, same tokens, whatever else runs in
// the batch). temperature == 0 is greedy: argmax of the penalised logits, lowest id on ties.
struct SamplingParams {
  float temperature = 1.0f;         // >= 0
  int32_t top_k = 0;                // >= 0; 0: off
  float top_p = 1.0f;               // in (0, 1]; 1: off
  float min_p = 0.0f;               // in [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off
  uint64_t seed = 0;
  int32_t max_tokens = 128;  // >= 1
  // In [0, vocab); the engine adds the model's EOS ids unless ignore_eos.
  std::vector<int32_t> stop_token_ids = {};
  bool ignore_eos = false;
  // Strings that end the generation when they appear in its text (needs the model's tokenizer);
  // the text stops before the stop string, which is not part of it. Non-empty.
  std::vector<std::string> stop_strings = {};

  // InvalidArgument naming the first field out of range.
  absl::Status Validate(int32_t vocab_size) const;
};

}  // namespace pulse
