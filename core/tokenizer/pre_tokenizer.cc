#include "core/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pulse {
namespace {

constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kDigitPattern[] = R"(\p{N})";

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

// One compiled expression; Split is thread-safe (match data is per call).
class Regex {
 public:
  static absl::StatusOr<Regex> Compile(std::string_view pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InternalError(absl::StrCat("pre-tokenizer pattern does not compile at ", offset,
                                              ": ", reinterpret_cast<const char*>(message)));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT it still matches, slower
    return Regex(code);
  }

  // Appends the pieces of `text` to `pieces`: matches and the stretches between them.
  void Split(std::string_view text, std::vector<std::string_view>& pieces) const {
    const std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr));
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;
    size_t gap = 0;
    while (start < text.size()) {
      const int found =
          pcre2_match(code_.get(), subject, text.size(), start, 0, data.get(), nullptr);
      if (found < 0) break;
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      const size_t begin = ovector[0];
      const size_t end = ovector[1];
      if (end == begin) {  // the expressions match no empty string, but be safe
        start = begin + 1;
        continue;
      }
      if (begin > gap) pieces.push_back(text.substr(gap, begin - gap));
      pieces.push_back(text.substr(begin, end - begin));
      gap = start = end;
    }
    if (gap < text.size()) pieces.push_back(text.substr(gap));
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  std::unique_ptr<pcre2_code, CodeDeleter> code_;
};

// The expressions applied in sequence, each splitting the pieces of the one before.
class RegexPreTokenizer final : public PreTokenizer {
 public:
  explicit RegexPreTokenizer(std::vector<Regex> stages) : stages_(std::move(stages)) {}

  std::vector<std::string_view> Split(std::string_view text) const override {
    std::vector<std::string_view> pieces = {text};
    for (const Regex& stage : stages_) {
      std::vector<std::string_view> next;
      next.reserve(pieces.size() * 2);
      for (const std::string_view piece : pieces) stage.Split(piece, next);
      pieces = std::move(next);
    }
    return pieces;
  }

 private:
  std::vector<Regex> stages_;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> Build(std::vector<std::string_view> patterns) {
  std::vector<Regex> stages;
  for (const std::string_view pattern : patterns) {
    PULSE_ASSIGN_OR_RETURN(Regex regex, Regex::Compile(pattern));
    stages.push_back(std::move(regex));
  }
  return std::make_unique<RegexPreTokenizer>(std::move(stages));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::string_view name) {
  if (name == "gpt2" || name == "default") return Build({kGpt2Pattern});
  // SmolLM splits every digit off first (Hugging Face's Digits(individual_digits=True)).
  if (name == "smollm") return Build({kDigitPattern, kGpt2Pattern});
  if (name == "llama-bpe" || name == "llama3") return Build({kLlama3Pattern});
  if (name == "qwen2") return Build({kQwen2Pattern});
  return absl::UnimplementedError(
      absl::StrCat("unsupported pre-tokenizer '", absl::string_view(name.data(), name.size()),
                   "' (supported: gpt2, default, smollm, llama-bpe, llama3, qwen2)"));
}

}  // namespace pulse
