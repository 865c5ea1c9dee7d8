#include "core/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "absl/strings/str_cat.h"

namespace pulse {
namespace {

struct NamedPreTokenizer {
  std::string_view name;
  std::vector<std::string_view> patterns;
};

const std::vector<NamedPreTokenizer>& NamedPreTokenizers() {
  static const std::vector<NamedPreTokenizer> known = {
      {"gpt2", {kGpt2Pattern}},     {"llama-bpe", {kLlama3Pattern}},
      {"llama3", {kLlama3Pattern}}, {"smollm", {kIndividualDigitsPattern, kGpt2Pattern}},
      {"qwen2", {kQwen2Pattern}},
  };
  return known;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* context) const { pcre2_match_context_free(context); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* stack) const { pcre2_jit_stack_free(stack); }
};

constexpr size_t kJitStackMinBytes = 32 * 1024;
constexpr size_t kJitStackMaxBytes = 4 * 1024 * 1024;

// The per-call state of matching (PCRE2's match data and JIT stack are not shareable).
class Matcher {
 public:
  Matcher()
      : data_(pcre2_match_data_create(1, nullptr)),
        context_(pcre2_match_context_create(nullptr)),
        stack_(pcre2_jit_stack_create(kJitStackMinBytes, kJitStackMaxBytes, nullptr)) {
    if (context_ != nullptr && stack_ != nullptr) {
      pcre2_jit_stack_assign(context_.get(), nullptr, stack_.get());
    }
  }

  bool ok() const { return data_ != nullptr; }

  // Splits `piece` by `code` into matches and the text between them.
  void SplitPiece(const pcre2_code* code, std::string_view piece,
                  std::vector<std::string_view>& out) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    size_t emitted = 0;
    size_t offset = 0;
    while (offset < piece.size()) {
      const int rc =
          pcre2_match(code, subject, piece.size(), offset, 0, data_.get(), context_.get());
      if (rc < 0) break;  // no further match (or a matching error: the rest is one piece)
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data_.get());
      const size_t start = ovector[0];
      const size_t end = ovector[1];
      if (end <= start) {  // an empty match: try again one character further
        offset = start + 1;
        while (offset < piece.size() && (static_cast<uint8_t>(piece[offset]) & 0xC0) == 0x80) {
          ++offset;
        }
        continue;
      }
      if (start > emitted) out.push_back(piece.substr(emitted, start - emitted));
      out.push_back(piece.substr(start, end - start));
      emitted = offset = end;
    }
    if (emitted < piece.size()) out.push_back(piece.substr(emitted));
  }

 private:
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data_;
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> context_;
  std::unique_ptr<pcre2_jit_stack, JitStackDeleter> stack_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> PreTokenizerPatterns(std::string_view name) {
  for (const NamedPreTokenizer& known : NamedPreTokenizers()) {
    if (known.name == name)
      return std::vector<std::string>(known.patterns.begin(), known.patterns.end());
  }
  return absl::UnimplementedError(
      absl::StrCat("unsupported pre-tokenizer '", absl::string_view(name.data(), name.size()),
                   "' (supported: gpt2, llama-bpe, llama3, smollm, qwen2)"));
}

std::string_view PreTokenizerNameOf(std::span<const std::string> patterns) {
  for (const NamedPreTokenizer& known : NamedPreTokenizers()) {
    if (known.patterns.size() != patterns.size()) continue;
    bool same = true;
    for (size_t i = 0; i < patterns.size(); ++i) same = same && known.patterns[i] == patterns[i];
    if (same) return known.name;
  }
  return "";
}

void PreTokenizer::CodeDeleter::operator()(pcre2_real_code_8* code) const { pcre2_code_free(code); }

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<PreTokenizer> PreTokenizer::Create(std::span<const std::string> patterns) {
  std::vector<Code> steps;
  for (const std::string& pattern : patterns) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    Code code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset,
                            nullptr));
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      return absl::InvalidArgumentError(
          absl::StrCat("pre-tokenizer regex '", pattern, "' does not compile at offset ",
                       error_offset, ": ", reinterpret_cast<const char*>(message.data())));
    }
    // Without JIT (unsupported platform) the interpreter gives the same matches, slower.
    pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
    steps.push_back(std::move(code));
  }
  return PreTokenizer(std::move(steps));
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (steps_.empty()) {
    if (!text.empty()) pieces.push_back(text);
    return;
  }
  Matcher matcher;
  if (!matcher.ok()) {  // out of memory for PCRE2's match data: keep the text whole
    pieces.push_back(text);
    return;
  }
  std::vector<std::string_view> current = {text};
  std::vector<std::string_view> next;
  for (size_t step = 0; step < steps_.size(); ++step) {
    std::vector<std::string_view>& out = step + 1 == steps_.size() ? pieces : next;
    for (const std::string_view piece : current) matcher.SplitPiece(steps_[step].get(), piece, out);
    if (&out == &next) {
      current.swap(next);
      next.clear();
    }
  }
}

}  // namespace pulse
