// Jinja template source -> tokens, with the whitespace handling Hugging Face renders chat
// templates with (trim_blocks and lstrip_blocks on, keep_trailing_newline off) already applied:
// kText tokens hold exactly the text the template outputs there. Comments are dropped and string
// literals are decoded, so the tokens no longer depend on quotes, escapes, whitespace inside
// tags or whitespace-control signs. This is a lexer for recognising templates, not a renderer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace pulse {

enum class JinjaTokenKind {
  kText,           // literal output between tags
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifiers and keywords
  kString,         // a string literal's value, escapes decoded
  kNumber,         // an integer or float literal as written
  kOperator,       // + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } ;
};

struct JinjaToken {
  JinjaTokenKind kind;
  std::string value;

  bool operator==(const JinjaToken&) const = default;
};

// InvalidArgument (with the byte offset) where the source is not a template Jinja would lex:
// an unterminated tag, comment or string, unbalanced brackets, a character no token starts with.
// Unimplemented for {% raw %} blocks.
absl::StatusOr<std::vector<JinjaToken>> LexJinja(std::string_view source);

}  // namespace pulse
