// Recognising a template by its structure. Both the model's template and our reference
// templates are lexed and brought to one canonical form in which spellings that render the same
// for a conversation of string messages compare equal:
//   - x['name'] and x.name (for keys that are not dict methods);
//   - {{ a + 'b' + c }} and {{ a }}b{{ c }}, when the + chain is the whole expression (its terms
//     are strings in every template we accept, where + is concatenation);
//   - a {{ 'literal' }} and the same text written outside tags; adjacent texts are merged.
// A reference template may hold captures, written @@name@@ inside a string literal or text:
// the candidate's text there is taken as that parameter (a default system prompt, a date).
// Everything else must be equal token for token.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/chat/jinja_lexer.h"

namespace pulse {

using TemplateCaptures = std::map<std::string, std::string, std::less<>>;

// LexJinja, then the canonical form described above.
absl::StatusOr<std::vector<JinjaToken>> CanonicalTemplate(std::string_view source);

// The captures when `candidate` (canonical) has the structure of `reference` (canonical, with
// @@name@@ captures); nullopt otherwise. A capture named twice must match the same text.
std::optional<TemplateCaptures> MatchTemplate(std::span<const JinjaToken> reference,
                                              std::span<const JinjaToken> candidate);

// The text captured as `name` ("" when there is no such capture).
std::string_view Captured(const TemplateCaptures& captures, std::string_view name);

// CanonicalTemplate(reference_source) then MatchTemplate: the reference is one of ours, so a
// failure to lex it is an Internal error.
absl::StatusOr<std::optional<TemplateCaptures>> MatchReference(
    std::string_view reference_source, std::span<const JinjaToken> candidate);

}  // namespace pulse
