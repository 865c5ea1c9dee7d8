#include "core/tokenizer/special_tokens.h"

#include <algorithm>

namespace pulse {

SpecialTokenMatcher::SpecialTokenMatcher(std::span<const std::string> tokens,
                                         std::span<const TokenKind> kinds) {
  for (size_t id = 0; id < tokens.size() && id < kinds.size(); ++id) {
    const TokenKind kind = kinds[id];
    const bool control = kind == TokenKind::kControl || kind == TokenKind::kUnknown;
    if ((!control && kind != TokenKind::kUserDefined) || tokens[id].empty()) continue;
    by_first_byte_[static_cast<uint8_t>(tokens[id][0])].push_back(
        {tokens[id], static_cast<int32_t>(id), control});
  }
  for (std::vector<Candidate>& candidates : by_first_byte_) {
    std::stable_sort(
        candidates.begin(), candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.text.size() > b.text.size(); });
  }
}

void SpecialTokenMatcher::Split(std::string_view text, bool parse_control,
                                std::vector<TextSegment>& out) const {
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const Candidate* found = nullptr;
    for (const Candidate& candidate : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      if ((parse_control || !candidate.control) && text.substr(pos).starts_with(candidate.text)) {
        found = &candidate;
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    if (pos > plain_start) out.push_back({text.substr(plain_start, pos - plain_start), -1});
    out.push_back({found->text, found->id});
    pos += found->text.size();
    plain_start = pos;
  }
  if (pos > plain_start) out.push_back({text.substr(plain_start, pos - plain_start), -1});
}

}  // namespace pulse
