// Finding valid UTF-8 sequences in arbitrary bytes.
#pragma once

#include <cstddef>
#include <string_view>

namespace pulse {

// The length (1..4) of the well-formed UTF-8 sequence that `text` starts with, or 0 when it
// does not start with one (empty, a stray continuation byte, an overlong form, a surrogate, a
// code point above U+10FFFF, or a truncated sequence).
size_t Utf8SequenceLength(std::string_view text);

// Calls `on_valid(run)` for each maximal stretch of well-formed UTF-8 and `on_invalid(byte)`
// for each byte that starts no well-formed sequence, in text order.
template <typename OnValid, typename OnInvalid>
void ForEachUtf8Run(std::string_view text, OnValid&& on_valid, OnInvalid&& on_invalid) {
  size_t run_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = Utf8SequenceLength(text.substr(pos));
    if (length > 0) {
      pos += length;
      continue;
    }
    if (pos > run_start) on_valid(text.substr(run_start, pos - run_start));
    on_invalid(text.substr(pos, 1));
    run_start = ++pos;
  }
  if (pos > run_start) on_valid(text.substr(run_start, pos - run_start));
}

}  // namespace pulse
