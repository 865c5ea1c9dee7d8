// The text of a generation as it streams: token pieces from the tokenizer, emitted only at
// UTF-8 character boundaries, with stop strings caught across token boundaries. The pieces a
// stream emits, concatenated, equal Tokenizer::Decode of the same tokens (until a stop string).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/text/stop_matcher.h"
#include "core/tokenizer/tokenizer.h"

namespace pulse {

class TextStream {
 public:
  // `tokenizer` must outlive the stream.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
             const DecodeOptions& options = {});

  struct Piece {
    std::string text;      // may be empty (a control token, half a character, a held prefix)
    bool stopped = false;  // a stop string ended the text; it is not part of `text`
  };
  // The next generated token.
  Piece Add(int32_t token);
  // Everything still held back, at the end of the generation (incomplete UTF-8 as its bytes).
  std::string Finish();

  bool stopped() const { return stops_.stopped(); }

 private:
  const Tokenizer& tokenizer_;
  const DecodeOptions options_;
  StopMatcher stops_;
  std::string pending_;   // bytes of a character not yet complete
  bool at_start_ = true;  // no text yet: SentencePiece's leading space is still to be removed
};

}  // namespace pulse
