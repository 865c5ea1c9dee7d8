// GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable code point
// (printable Latin-1 bytes for themselves, the others for U+0100 onwards), so that any byte
// string is a text of these symbols and a vocabulary can cover every input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pulse {

// The UTF-8 encoding of the symbol for `byte`.
std::string_view ByteLevelSymbol(uint8_t byte);

// The symbols of `bytes`, concatenated.
std::string ByteLevelEncode(std::string_view bytes);

// Undoes ByteLevelEncode. Characters outside the alphabet (and invalid UTF-8) are kept as the
// bytes they are.
std::string ByteLevelDecode(std::string_view text);

}  // namespace pulse
