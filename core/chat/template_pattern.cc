#include "core/chat/template_pattern.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pulse {
namespace {

using Kind = JinjaTokenKind;

constexpr std::string_view kCaptureMark = "@@";

bool Is(const JinjaToken& token, Kind kind, std::string_view value) {
  return token.kind == kind && token.value == value;
}

bool IsIdentifier(std::string_view text) {
  if (text.empty() || !((text[0] >= 'a' && text[0] <= 'z') || (text[0] >= 'A' && text[0] <= 'Z') ||
                        text[0] == '_')) {
    return false;
  }
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool IsKeyword(std::string_view name) {
  static constexpr std::array<std::string_view, 16> kKeywords = {
      "and", "or",   "not",   "in",   "is",   "if",    "else", "elif",
      "for", "true", "false", "none", "True", "False", "None", "recursive"};
  return std::find(kKeywords.begin(), kKeywords.end(), name) != kKeywords.end();
}

// x['key'] reads the same as x.key for a dict unless the key names one of its methods.
bool IsDictMethod(std::string_view name) {
  static constexpr std::array<std::string_view, 11> kMethods = {
      "keys", "values", "items", "get",        "pop",     "popitem",
      "copy", "update", "clear", "setdefault", "fromkeys"};
  return std::find(kMethods.begin(), kMethods.end(), name) != kMethods.end();
}

// Whether tokens[i] ends an expression that a following [ subscripts.
bool EndsOperand(const JinjaToken& token) {
  return (token.kind == Kind::kName && !IsKeyword(token.value)) ||
         Is(token, Kind::kOperator, ")") || Is(token, Kind::kOperator, "]");
}

std::vector<JinjaToken> SubscriptsToAttributes(std::vector<JinjaToken> tokens) {
  std::vector<JinjaToken> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i + 2 < tokens.size() && !out.empty() && EndsOperand(out.back()) &&
        Is(tokens[i], Kind::kOperator, "[") && tokens[i + 1].kind == Kind::kString &&
        Is(tokens[i + 2], Kind::kOperator, "]") && IsIdentifier(tokens[i + 1].value) &&
        !IsDictMethod(tokens[i + 1].value)) {
      out.push_back({Kind::kOperator, "."});
      out.push_back({Kind::kName, std::move(tokens[i + 1].value)});
      i += 2;
      continue;
    }
    out.push_back(std::move(tokens[i]));
  }
  return out;
}

// The terms of an output expression that is a plain chain a + b + ..., or one term when it is
// anything else: a top-level operator that binds looser than + (or, and, not, if/else,
// comparisons, in, is, -), or a unary or dangling +, keeps the expression whole.
std::vector<std::span<const JinjaToken>> ConcatenationTerms(std::span<const JinjaToken> expr) {
  static constexpr std::array<std::string_view, 13> kLooser = {
      "or", "and", "not", "if", "else", "in", "is", "==", "!=", "<", "<=", ">", ">="};
  std::vector<std::span<const JinjaToken>> terms;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < expr.size(); ++i) {
    const JinjaToken& token = expr[i];
    if (token.kind == Kind::kOperator &&
        (token.value == "(" || token.value == "[" || token.value == "{")) {
      ++depth;
    } else if (token.kind == Kind::kOperator &&
               (token.value == ")" || token.value == "]" || token.value == "}")) {
      --depth;
    }
    if (depth != 0 || token.kind == Kind::kString || token.kind == Kind::kNumber) continue;
    const bool looser = std::find(kLooser.begin(), kLooser.end(), token.value) != kLooser.end() &&
                        (token.kind == Kind::kOperator || token.kind == Kind::kName);
    if (looser || Is(token, Kind::kOperator, "-")) return {expr};
    if (Is(token, Kind::kOperator, "+")) {
      if (i == start) return {expr};
      terms.push_back(expr.subspan(start, i - start));
      start = i + 1;
    }
  }
  if (start == expr.size()) return {expr};
  terms.push_back(expr.subspan(start));
  return terms;
}

void AppendText(std::vector<JinjaToken>& out, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == Kind::kText) {
    out.back().value.append(text);
  } else {
    out.push_back({Kind::kText, std::string(text)});
  }
}

std::vector<JinjaToken> SplitOutputs(const std::vector<JinjaToken>& tokens) {
  std::vector<JinjaToken> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].kind == Kind::kText) {
      AppendText(out, tokens[i].value);
      continue;
    }
    if (tokens[i].kind != Kind::kVariableBegin) {
      out.push_back(tokens[i]);
      continue;
    }
    size_t end = i + 1;
    while (end < tokens.size() && tokens[end].kind != Kind::kVariableEnd) ++end;
    const std::span<const JinjaToken> expr(tokens.data() + i + 1, end - i - 1);
    for (const std::span<const JinjaToken> term : ConcatenationTerms(expr)) {
      if (term.size() == 1 && term[0].kind == Kind::kString) {
        AppendText(out, term[0].value);
        continue;
      }
      out.push_back({Kind::kVariableBegin, ""});
      out.insert(out.end(), term.begin(), term.end());
      out.push_back({Kind::kVariableEnd, ""});
    }
    i = end;
  }
  return out;
}

// `reference` holds at most one @@name@@; the candidate must have the text around it.
bool MatchValue(std::string_view reference, std::string_view candidate,
                TemplateCaptures& captures) {
  const size_t open = reference.find(kCaptureMark);
  if (open == std::string_view::npos) return reference == candidate;
  const size_t close = reference.find(kCaptureMark, open + kCaptureMark.size());
  if (close == std::string_view::npos) return reference == candidate;
  const std::string_view name =
      reference.substr(open + kCaptureMark.size(), close - open - kCaptureMark.size());
  const std::string_view prefix = reference.substr(0, open);
  const std::string_view suffix = reference.substr(close + kCaptureMark.size());
  if (candidate.size() < prefix.size() + suffix.size() || !candidate.starts_with(prefix) ||
      !candidate.ends_with(suffix)) {
    return false;
  }
  const std::string_view value =
      candidate.substr(prefix.size(), candidate.size() - prefix.size() - suffix.size());
  const auto [it, inserted] = captures.emplace(std::string(name), std::string(value));
  return inserted || it->second == value;
}

}  // namespace

absl::StatusOr<std::vector<JinjaToken>> CanonicalTemplate(std::string_view source) {
  PULSE_ASSIGN_OR_RETURN(std::vector<JinjaToken> tokens, LexJinja(source));
  return SplitOutputs(SubscriptsToAttributes(std::move(tokens)));
}

std::optional<TemplateCaptures> MatchTemplate(std::span<const JinjaToken> reference,
                                              std::span<const JinjaToken> candidate) {
  if (reference.size() != candidate.size()) return std::nullopt;
  TemplateCaptures captures;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (reference[i].kind != candidate[i].kind) return std::nullopt;
    const bool may_capture = reference[i].kind == Kind::kText || reference[i].kind == Kind::kString;
    if (may_capture ? !MatchValue(reference[i].value, candidate[i].value, captures)
                    : reference[i].value != candidate[i].value) {
      return std::nullopt;
    }
  }
  return captures;
}

std::string_view Captured(const TemplateCaptures& captures, std::string_view name) {
  const auto it = captures.find(name);
  return it == captures.end() ? std::string_view() : std::string_view(it->second);
}

absl::StatusOr<std::optional<TemplateCaptures>> MatchReference(
    std::string_view reference_source, std::span<const JinjaToken> candidate) {
  absl::StatusOr<std::vector<JinjaToken>> reference = CanonicalTemplate(reference_source);
  if (!reference.ok()) {
    return absl::InternalError(
        absl::StrCat("a reference chat template does not lex: ", reference.status().message()));
  }
  return MatchTemplate(*reference, candidate);
}

}  // namespace pulse
