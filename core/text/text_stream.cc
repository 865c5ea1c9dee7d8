#include "core/text/text_stream.h"

#include <string_view>
#include <utility>

#include "core/text/utf8.h"

namespace pulse {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                       const DecodeOptions& options)
    : tokenizer_(tokenizer), options_(options), stops_(std::move(stop_strings)) {}

TextStream::Piece TextStream::Add(int32_t token) {
  if (stops_.stopped()) return {.text = {}, .stopped = true};
  const bool rendered = options_.render_special || tokenizer_.kind(token) != TokenKind::kControl;
  std::string_view piece = rendered ? tokenizer_.TokenPiece(token) : std::string_view();
  if (at_start_ && !piece.empty()) {
    if (tokenizer_.add_space_prefix() && piece.front() == ' ') piece.remove_prefix(1);
    at_start_ = false;
  }
  pending_.append(piece);
  const size_t complete = CompleteUtf8Prefix(pending_);
  StopMatcher::Result result = stops_.Add(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return {.text = std::move(result.text), .stopped = result.stopped};
}

std::string TextStream::Finish() {
  if (stops_.stopped()) return {};
  StopMatcher::Result result = stops_.Add(std::exchange(pending_, {}));
  if (result.stopped) return std::move(result.text);
  return result.text + stops_.Flush();
}

}  // namespace pulse
