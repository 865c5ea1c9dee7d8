// The format-specific openers behind OpenTensorSource (tensor_source.h).
#pragma once

#include <memory>
#include <string>

#include "core/base/status.h"
#include "core/model/tensor_source.h"

namespace pulse {

// A GGUF model file (architectures llama and qwen2; llama.cpp writes Mistral models as llama).
absl::StatusOr<std::unique_ptr<TensorSource>> OpenGgufSource(const std::string& path);

// A Hugging Face model directory: config.json plus model.safetensors, or
// model.safetensors.index.json and its shards. `path` is the directory or its config.json.
absl::StatusOr<std::unique_ptr<TensorSource>> OpenSafetensorsSource(const std::string& path);

}  // namespace pulse
