// Where a model's weights come from: a GGUF file, a Hugging Face safetensors directory, or a
// seeded random generator. A source yields the config and, tensor by tensor, fp32 values in
// Hugging Face naming and layout, so at most one tensor is dequantized at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/backend/dtype.h"
#include "core/base/status.h"
#include "core/format/config.h"

namespace pulse {

// Canonical (Hugging Face) tensor names, e.g. "model.layers.3.self_attn.q_proj.weight",
// "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight".
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // outermost first: a linear layer is [out_features, in_features]
  std::string stored_type;     // as stored: "Q4_1", "bf16", "f32", "random"...
  int64_t elements() const;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  virtual std::string_view format() const = 0;  // "gguf", "safetensors", "random"
  virtual const ModelConfig& config() const = 0;
  virtual std::span<const TensorInfo> tensors() const = 0;
  // Writes the tensor's values, dequantized to fp32, row-major in Hugging Face layout (GGUF's
  // permuted q/k rows are restored). `out` must hold exactly elements() values.
  // NotFound when the source has no such tensor.
  virtual absl::Status Read(std::string_view name, std::span<float> out) const = 0;
  // Appends to `out` the matrix's blocks as stored, rows in Hugging Face order, when it is
  // stored in a block type that backends compute on (core/backend/dtype.h), and returns the type;
  // Unimplemented when it is stored otherwise (the caller reads the values), NotFound when the
  // source has no such tensor.
  virtual absl::StatusOr<DType> ReadBlocks(std::string_view name,
                                           std::vector<std::byte>& out) const;
  // String metadata of the file (GGUF key/values rendered as text, config.json fields), for
  // `pulseinfer info` and later the tokenizer.
  virtual const std::map<std::string, std::string>& metadata() const = 0;
};

// Opens `path`, detecting the format: a GGUF file (by magic), or a directory (or config.json)
// with model.safetensors or model.safetensors.index.json.
absl::StatusOr<std::unique_ptr<TensorSource>> OpenTensorSource(const std::string& path);

// A source of deterministic random weights (seeded) for `config`, at real shapes.
absl::StatusOr<std::unique_ptr<TensorSource>> OpenRandomSource(const ModelConfig& config,
                                                               uint64_t seed);

}  // namespace pulse
