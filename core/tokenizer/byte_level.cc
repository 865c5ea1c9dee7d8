#include "core/tokenizer/byte_level.h"

#include "absl/container/flat_hash_map.h"

namespace pulse {
namespace {

std::string Utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

// Printable Latin-1 bytes stand for themselves; the others take U+0100 onwards, in byte order.
std::array<std::string, 256> BuildAlphabet() {
  std::array<std::string, 256> alphabet;
  uint32_t next = 256;
  for (uint32_t byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                           (byte >= 0xAE && byte <= 0xFF);
    alphabet[byte] = Utf8(printable ? byte : next++);
  }
  return alphabet;
}

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

const absl::flat_hash_map<std::string, uint8_t>& InverseAlphabet() {
  static const absl::flat_hash_map<std::string, uint8_t> inverse = [] {
    absl::flat_hash_map<std::string, uint8_t> map;
    for (int byte = 0; byte < 256; ++byte) map[ByteLevelAlphabet()[byte]] = byte;
    return map;
  }();
  return inverse;
}

}  // namespace

const std::array<std::string, 256>& ByteLevelAlphabet() {
  static const std::array<std::string, 256> alphabet = BuildAlphabet();
  return alphabet;
}

std::string ByteLevelDecode(std::string_view text) {
  const auto& inverse = InverseAlphabet();
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t length =
        std::min(Utf8Length(static_cast<unsigned char>(text[i])), text.size() - i);
    const std::string character(text.substr(i, length));
    const auto it = inverse.find(character);
    if (it != inverse.end()) {
      out += static_cast<char>(it->second);
    } else {
      out += character;
    }
    i += length;
  }
  return out;
}

}  // namespace pulse
