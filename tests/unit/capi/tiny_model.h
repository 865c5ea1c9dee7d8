// A tiny seeded random Llama model loaded through the ABI, for the capi tests: 2 layers,
// hidden 64, 4 heads, 2 KV heads, vocab 300, context 256; end-of-sequence id 2.
#pragma once

#include <string>
#include <vector>

#include "pulseinfer/pulseinfer.h"

namespace pulse::capi_test {

inline constexpr int kTinyVocab = 300;
inline constexpr int kTinyContext = 256;

// The tiny model's config, tests/data/tiny-llama.json (shared with the bindings' tests), found
// through PULSE_SOURCE_DIR as ctest sets it.
std::string TinyConfigPath();

// A file path under the test temp dir holding `content`.
std::string WriteTempFile(const std::string& name, const std::string& content);

// Loads the tiny model with random weights (seed 7), split over `tensor_parallel_size` ranks;
// fails the test on error.
pulse_model* LoadTinyModel(int32_t tensor_parallel_size = 0);

// An engine over `model` with a small KV cache; fails the test on error.
pulse_engine* CreateTinyEngine(pulse_model* model);

// Greedy sampling of `max_tokens` tokens, end-of-sequence ignored.
pulse_sampling_params GreedySampling(int max_tokens);

// A prompt of `length` ids inside the vocabulary.
std::vector<int32_t> TinyPrompt(int length);

}  // namespace pulse::capi_test
