// The regex pre-tokenizer of byte-level BPE: splits text into the pieces that BPE then merges
// independently. A pre-tokenizer is a sequence of steps; each step runs its regex over every
// piece of the previous step and keeps both the matches and the text between them as pieces
// (Hugging Face's Split with the "isolated" behaviour), so no byte is ever lost.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

struct pcre2_real_code_8;

namespace pulse {

// Patterns of the pre-tokenizers known by name (GGUF tokenizer.ggml.pre).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Hugging Face's Digits(individual_digits=true): every numeric character alone.
inline constexpr std::string_view kIndividualDigitsPattern = R"(\p{N})";

// The steps of a named pre-tokenizer: "gpt2", "llama-bpe" (alias "llama3"), "smollm", "qwen2".
// Unimplemented "unsupported pre-tokenizer 'NAME'" for any other name.
absl::StatusOr<std::vector<std::string>> PreTokenizerPatterns(std::string_view name);

// The name of the known pre-tokenizer with exactly these steps, or "" when none is.
std::string_view PreTokenizerNameOf(std::span<const std::string> patterns);

class PreTokenizer {
 public:
  // Compiles each pattern (UTF, Unicode properties, invalid UTF-8 never matching, JIT when
  // available). InvalidArgument naming the pattern and PCRE2's message when one does not compile.
  static absl::StatusOr<PreTokenizer> Create(std::span<const std::string> patterns);

  PreTokenizer(PreTokenizer&&) = default;
  PreTokenizer& operator=(PreTokenizer&&) = default;
  ~PreTokenizer();

  // Appends the pieces of `text` to `pieces` (views into `text`). Without steps, `text` is the
  // one piece. Thread-safe.
  void Split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* code) const;
  };
  using Code = std::unique_ptr<pcre2_real_code_8, CodeDeleter>;

  explicit PreTokenizer(std::vector<Code> steps) : steps_(std::move(steps)) {}

  std::vector<Code> steps_;
};

}  // namespace pulse
