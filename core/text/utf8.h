// UTF-8 boundaries for streaming text: how much of a byte string can be emitted now without
// splitting a character that later bytes may complete.
#pragma once

#include <cstddef>
#include <string_view>

namespace pulse {

// The length of the longest prefix of `bytes` that does not end inside an incomplete but so far
// valid UTF-8 sequence. Bytes that can never become valid UTF-8 (a stray continuation byte, an
// overlong or surrogate lead, 0xF5..0xFF) are not held back: they belong to the prefix, so that
// invalid text streams out as the same bytes a whole decode gives.
size_t CompleteUtf8Prefix(std::string_view bytes);

}  // namespace pulse
