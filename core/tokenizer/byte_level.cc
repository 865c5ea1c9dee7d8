#include "core/tokenizer/byte_level.h"

#include <array>

#include "core/tokenizer/utf8_scan.h"

namespace pulse {
namespace {

struct Alphabet {
  std::array<std::string, 256> symbol;  // byte -> UTF-8 of its code point
  std::array<int16_t, 324> byte_of;     // code point (< 324) -> byte, or -1
};

std::string EncodeUtf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return out;
}

Alphabet MakeAlphabet() {
  Alphabet alphabet;
  alphabet.byte_of.fill(-1);
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const uint32_t code_point = printable(b) ? static_cast<uint32_t>(b) : next_extra++;
    alphabet.symbol[b] = EncodeUtf8(code_point);
    alphabet.byte_of[code_point] = static_cast<int16_t>(b);
  }
  return alphabet;
}

const Alphabet& GetAlphabet() {
  static const Alphabet alphabet = MakeAlphabet();
  return alphabet;
}

}  // namespace

std::string_view ByteLevelSymbol(uint8_t byte) { return GetAlphabet().symbol[byte]; }

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += ByteLevelSymbol(static_cast<uint8_t>(c));
  return out;
}

std::string ByteLevelDecode(std::string_view text) {
  const Alphabet& alphabet = GetAlphabet();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = Utf8SequenceLength(text.substr(pos));
    uint32_t code_point = 0x110000;
    if (length == 1) {
      code_point = static_cast<uint8_t>(text[pos]);
    } else if (length == 2) {
      code_point = ((static_cast<uint8_t>(text[pos]) & 0x1F) << 6) |
                   (static_cast<uint8_t>(text[pos + 1]) & 0x3F);
    }
    const size_t consumed = length == 0 ? 1 : length;
    if (code_point < alphabet.byte_of.size() && alphabet.byte_of[code_point] >= 0) {
      out.push_back(static_cast<char>(alphabet.byte_of[code_point]));
    } else {
      out.append(text.substr(pos, consumed));
    }
    pos += consumed;
  }
  return out;
}

}  // namespace pulse
