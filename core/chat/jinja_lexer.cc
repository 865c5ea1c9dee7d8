#include "core/chat/jinja_lexer.h"

#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/chat/python_strip.h"

namespace pulse {
namespace {

// \r\n and \r become \n, and one trailing newline is dropped (keep_trailing_newline = false).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

void AppendUtf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::optional<uint32_t> ParseHex(std::string_view digits) {
  uint32_t value = 0;
  for (const char c : digits) {
    value <<= 4;
    if (IsDigit(c)) {
      value |= static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      value |= static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      value |= static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
  }
  return value;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : source_(NormalizeNewlines(source)) {}

  absl::StatusOr<std::vector<JinjaToken>> Run() {
    while (pos_ < source_.size()) PULSE_RETURN_IF_ERROR(LexTextAndTag());
    return std::move(tokens_);
  }

 private:
  enum class Tag { kVariable, kBlock, kComment };

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "chat template: ", absl::string_view(what.data(), what.size()), " at byte ", pos_));
  }

  void EmitText(std::string_view text) {
    if (text.empty()) return;
    tokens_.push_back({JinjaTokenKind::kText, std::string(text)});
  }

  // Text up to the next tag opener, then the tag.
  absl::Status LexTextAndTag() {
    const std::string_view rest = std::string_view(source_).substr(pos_);
    size_t open = std::string_view::npos;
    Tag tag = Tag::kVariable;
    for (size_t i = 0; i + 1 < rest.size(); ++i) {
      if (rest[i] != '{') continue;
      const char second = rest[i + 1];
      if (second == '{' || second == '%' || second == '#') {
        open = i;
        tag = second == '{' ? Tag::kVariable : second == '%' ? Tag::kBlock : Tag::kComment;
        break;
      }
    }
    if (open == std::string_view::npos) {
      EmitText(rest);
      pos_ = source_.size();
      return absl::OkStatus();
    }
    std::string_view text = rest.substr(0, open);
    size_t after = open + 2;
    const char sign = after < rest.size() ? rest[after] : '\0';
    if (sign == '-' || sign == '+') ++after;
    if (sign == '-') {
      text = PythonRstrip(text);
    } else if (sign != '+' && tag != Tag::kVariable) {  // lstrip_blocks
      const size_t line_start = text.rfind('\n') + 1;   // npos + 1 == 0
      if ((line_start > 0 || line_starting_) && IsAllPythonSpace(text.substr(line_start))) {
        text = text.substr(0, line_start);
      }
    }
    EmitText(text);
    pos_ += after;
    if (tag == Tag::kComment) return LexCommentEnd();
    if (tag == Tag::kBlock && StartsRawBlock()) {
      return absl::UnimplementedError("chat template: {% raw %} blocks are not supported");
    }
    tokens_.push_back(
        {tag == Tag::kBlock ? JinjaTokenKind::kBlockBegin : JinjaTokenKind::kVariableBegin, ""});
    return LexTagBody(tag);
  }

  bool StartsRawBlock() const {
    std::string_view rest = PythonLstrip(std::string_view(source_).substr(pos_));
    if (!rest.starts_with("raw")) return false;
    rest = PythonLstrip(rest.substr(3));
    return rest.starts_with("%}") || rest.starts_with("-%}");
  }

  // After an end marker: `-` eats all following whitespace, a plain block or comment end eats
  // one newline (trim_blocks).
  void FinishEnd(size_t marker_end, char sign, bool trims_newline) {
    pos_ = marker_end;
    if (sign == '-') {
      pos_ = source_.size() - PythonLstrip(std::string_view(source_).substr(pos_)).size();
    } else if (sign != '+' && trims_newline && pos_ < source_.size() && source_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > 0 && source_[pos_ - 1] == '\n';
  }

  absl::Status LexCommentEnd() {
    const std::string_view source = source_;
    for (size_t i = pos_; i + 1 < source.size(); ++i) {
      const char sign = source[i];
      if ((sign == '-' || sign == '+') && source.substr(i + 1, 2) == "#}") {
        FinishEnd(i + 3, sign, true);
        return absl::OkStatus();
      }
      if (source.substr(i, 2) == "#}") {
        FinishEnd(i + 2, '\0', true);
        return absl::OkStatus();
      }
    }
    return Error("missing end of comment tag");
  }

  // The end marker of `tag` at pos_, if there is one: its length and whitespace sign.
  std::optional<std::pair<size_t, char>> EndMarker(Tag tag) const {
    const std::string_view rest = std::string_view(source_).substr(pos_);
    const std::string_view end = tag == Tag::kBlock ? "%}" : "}}";
    if (rest.starts_with(end)) return std::pair<size_t, char>{2, '\0'};
    if (rest.size() >= 3 && rest.substr(1, 2) == end) {
      if (rest[0] == '-') return std::pair<size_t, char>{3, '-'};
      if (rest[0] == '+' && tag == Tag::kBlock) return std::pair<size_t, char>{3, '+'};
    }
    return std::nullopt;
  }

  absl::Status LexTagBody(Tag tag) {
    std::vector<char> brackets;
    while (pos_ < source_.size()) {
      if (brackets.empty()) {
        if (const auto end = EndMarker(tag)) {
          tokens_.push_back(
              {tag == Tag::kBlock ? JinjaTokenKind::kBlockEnd : JinjaTokenKind::kVariableEnd, ""});
          FinishEnd(pos_ + end->first, end->second, tag == Tag::kBlock);
          return absl::OkStatus();
        }
      }
      const std::string_view rest = std::string_view(source_).substr(pos_);
      if (const size_t space = LeadingPythonSpace(rest); space > 0) {
        pos_ += space;
      } else if (IsDigit(rest[0])) {
        LexNumber(rest);
      } else if (IsNameStart(rest[0])) {
        size_t n = 1;
        while (n < rest.size() && IsNameChar(rest[n])) ++n;
        tokens_.push_back({JinjaTokenKind::kName, std::string(rest.substr(0, n))});
        pos_ += n;
      } else if (rest[0] == '\'' || rest[0] == '"') {
        PULSE_RETURN_IF_ERROR(LexString(rest));
      } else {
        PULSE_RETURN_IF_ERROR(LexOperator(rest, brackets));
      }
    }
    return Error(tag == Tag::kBlock ? "unterminated {% tag" : "unterminated {{ tag");
  }

  // Digits with underscores, an optional fraction (not right after a '.': `x.0.y` is two
  // subscripts) and exponent, or a 0x / 0o / 0b literal. Kept as written.
  void LexNumber(std::string_view rest) {
    const bool after_dot = pos_ > 0 && source_[pos_ - 1] == '.';
    size_t n = 0;
    auto digits = [&] {
      while (n < rest.size() && (IsNameChar(rest[n]))) ++n;  // also 0x.., 1_000, 1e5
    };
    digits();
    if (!after_dot && n + 1 < rest.size() && rest[n] == '.' && IsDigit(rest[n + 1])) {
      ++n;
      digits();
    }
    if (n < rest.size() && (rest[n] == '+' || rest[n] == '-') && (rest[n - 1] | 0x20) == 'e' &&
        n + 1 < rest.size() && IsDigit(rest[n + 1])) {
      ++n;
      digits();
    }
    tokens_.push_back({JinjaTokenKind::kNumber, std::string(rest.substr(0, n))});
    pos_ += n;
  }

  // Python's unicode-escape decoding of the literal's body, as Jinja applies it.
  absl::Status LexString(std::string_view rest) {
    const char quote = rest[0];
    std::string value;
    size_t i = 1;
    while (i < rest.size() && rest[i] != quote) {
      if (rest[i] != '\\') {
        value.push_back(rest[i++]);
        continue;
      }
      if (i + 1 >= rest.size()) break;
      const char e = rest[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          const std::optional<uint32_t> code = ParseHex(rest.substr(i, width));
          if (i + width > rest.size() || !code.has_value() || *code > 0x10FFFF ||
              (*code >= 0xD800 && *code <= 0xDFFF)) {
            return Error("bad \\x, \\u or \\U escape in a string literal");
          }
          AppendUtf8(value, *code);
          i += width;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t code = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < rest.size() && rest[i] >= '0' && rest[i] <= '7'; ++k) {
              code = code * 8 + static_cast<uint32_t>(rest[i++] - '0');
            }
            AppendUtf8(value, code);
          } else if (e == 'N') {
            return Error("\\N{...} escapes are not supported");
          } else {  // Python keeps an unknown escape as written
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    if (i >= rest.size()) return Error("unterminated string literal");
    tokens_.push_back({JinjaTokenKind::kString, std::move(value)});
    pos_ += i + 1;
    return absl::OkStatus();
  }

  absl::Status LexOperator(std::string_view rest, std::vector<char>& brackets) {
    static constexpr std::array<std::string_view, 6> kTwoChar = {
        "//", "**", "==", "!=", ">=", "<="};
    static constexpr std::string_view kOneChar = "+-/*%~[](){}><=.:|,;";
    std::string_view op;
    for (const std::string_view candidate : kTwoChar) {
      if (rest.starts_with(candidate)) op = candidate;
    }
    if (op.empty()) {
      if (kOneChar.find(rest[0]) == std::string_view::npos) {
        return Error(absl::StrCat("unexpected character '", absl::string_view(rest.data(), 1),
                                  "' in a tag"));
      }
      op = rest.substr(0, 1);
    }
    const char c = op[0];
    if (op.size() == 1 && (c == '(' || c == '[' || c == '{')) {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (op.size() == 1 && (c == ')' || c == ']' || c == '}')) {
      if (brackets.empty() || brackets.back() != c) return Error("unbalanced brackets");
      brackets.pop_back();
    }
    tokens_.push_back({JinjaTokenKind::kOperator, std::string(op)});
    pos_ += op.size();
    return absl::OkStatus();
  }

  const std::string source_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<JinjaToken> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<JinjaToken>> LexJinja(std::string_view source) {
  return Lexer(source).Run();
}

}  // namespace pulse
