// Hugging Face config.json reading.
#pragma once

#include <string_view>

#include "core/base/status.h"
#include "core/format/config.h"

namespace pulse {

// Parses a Hugging Face config.json text (LlamaConfig, MistralConfig, Qwen2Config) into a
// validated ModelConfig, with transformers' defaults for the fields it leaves out or sets to null.
absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view json_text);

}  // namespace pulse
