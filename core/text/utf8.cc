#include "core/text/utf8.h"

#include <cstdint>

namespace pulse {
namespace {

// The sequence length a lead byte announces, or 0 when it cannot start a sequence.
size_t SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `byte` may follow `lead` as the first continuation byte (RFC 3629's table: this is
// where overlong forms, surrogates and code points above U+10FFFF are excluded).
bool ValidSecondByte(uint8_t lead, uint8_t byte) {
  switch (lead) {
    case 0xE0:
      return byte >= 0xA0 && byte <= 0xBF;
    case 0xED:
      return byte >= 0x80 && byte <= 0x9F;
    case 0xF0:
      return byte >= 0x90 && byte <= 0xBF;
    case 0xF4:
      return byte >= 0x80 && byte <= 0x8F;
    default:
      return byte >= 0x80 && byte <= 0xBF;
  }
}

}  // namespace

size_t CompleteUtf8Prefix(std::string_view bytes) {
  // Only the last lead byte (at most 3 bytes back) can start an incomplete sequence.
  const size_t size = bytes.size();
  const size_t earliest = size >= 3 ? size - 3 : 0;
  for (size_t start = size; start > earliest;) {
    --start;
    const auto lead = static_cast<uint8_t>(bytes[start]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = SequenceLength(lead);
    const size_t present = size - start;
    if (length <= present) return size;  // complete, or not a lead: nothing is held back
    if (present >= 2 && !ValidSecondByte(lead, static_cast<uint8_t>(bytes[start + 1]))) {
      return size;
    }
    for (size_t i = start + 2; i < size; ++i) {
      if ((static_cast<uint8_t>(bytes[i]) & 0xC0) != 0x80) return size;
    }
    return start;
  }
  return size;
}

}  // namespace pulse
