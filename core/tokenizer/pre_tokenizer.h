// The pre-tokenizers of the byte-level BPE families: regular expressions (PCRE2, Unicode
// properties) that split text into the pieces BPE merges within.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace pulse {

class PreTokenizer {
 public:
  // `name` is GGUF's tokenizer.ggml.pre: "gpt2" (also "default"), "llama-bpe" / "llama3",
  // "smollm", "qwen2". Unimplemented ("unsupported pre-tokenizer 'NAME'") for any other.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(std::string_view name);
  virtual ~PreTokenizer() = default;

  // The pieces of `text`, in order, covering it exactly: each match of the expressions and each
  // stretch between matches (bytes of invalid UTF-8 never match, so they form such stretches).
  virtual std::vector<std::string_view> Split(std::string_view text) const = 0;
};

}  // namespace pulse
