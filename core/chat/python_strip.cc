#include "core/chat/python_strip.h"

#include <array>

namespace pulse {
namespace {

// The UTF-8 encodings of the 29 characters for which Python's str.isspace() is true.
constexpr std::array<std::string_view, 29> kPythonSpaces = {
    "\t",           "\n",           "\v",           "\f",           "\r",
    "\x1c",         "\x1d",         "\x1e",         "\x1f",         " ",
    "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
    "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86",
    "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8",
    "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80",
};

}  // namespace

size_t LeadingPythonSpace(std::string_view text) {
  for (const std::string_view space : kPythonSpaces) {
    if (text.starts_with(space)) return space.size();
  }
  return 0;
}

size_t TrailingPythonSpace(std::string_view text) {
  // A lead byte is never a continuation byte, so a suffix equal to a whole encoding is that
  // character in valid UTF-8 (invalid bytes are never whitespace, as for Python).
  for (const std::string_view space : kPythonSpaces) {
    if (text.ends_with(space)) return space.size();
  }
  return 0;
}

std::string_view PythonLstrip(std::string_view text) {
  for (size_t n = LeadingPythonSpace(text); n > 0; n = LeadingPythonSpace(text)) {
    text.remove_prefix(n);
  }
  return text;
}

std::string_view PythonRstrip(std::string_view text) {
  for (size_t n = TrailingPythonSpace(text); n > 0; n = TrailingPythonSpace(text)) {
    text.remove_suffix(n);
  }
  return text;
}

std::string_view PythonStrip(std::string_view text) { return PythonRstrip(PythonLstrip(text)); }

bool IsAllPythonSpace(std::string_view text) { return !text.empty() && PythonLstrip(text).empty(); }

}  // namespace pulse
