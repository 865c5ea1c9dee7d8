// Finding special tokens written in text before the text is tokenized.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace pulse {

// A stretch of text, or a token found in it (id >= 0).
struct TextSegment {
  std::string_view text;
  int32_t id = -1;
};

class SpecialTokenMatcher {
 public:
  // Every control, unknown and user-defined token with non-empty text is matched; when two ids
  // share a text, the lower id wins.
  SpecialTokenMatcher(std::span<const std::string> tokens, std::span<const TokenKind> kinds);

  // Appends the segments of `text`: at each position the longest token that starts there, the
  // leftmost first. Control and unknown tokens are matched only when `parse_control`;
  // user-defined tokens always (they are ordinary text to the model's authors too).
  void Split(std::string_view text, bool parse_control, std::vector<TextSegment>& out) const;

 private:
  struct Candidate {
    std::string_view text;  // views the tokenizer's vocabulary
    int32_t id;
    bool control;
  };
  std::array<std::vector<Candidate>, 256> by_first_byte_;  // longest first
};

}  // namespace pulse
