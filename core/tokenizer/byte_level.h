// GPT-2's byte-level alphabet: every byte is one printable Unicode character, so that a byte-level
// BPE vocabulary can be stored as text ("Ġthe" for " the").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace pulse {

// The UTF-8 text of the character that stands for each byte.
const std::array<std::string, 256>& ByteLevelAlphabet();

// The bytes a byte-level token text stands for. Characters outside the alphabet (added tokens
// written as plain text) are kept as their UTF-8 bytes.
std::string ByteLevelDecode(std::string_view text);

}  // namespace pulse
