// Python's whitespace (str.isspace) over UTF-8 text. Jinja's trim filter is Python's
// str.strip() and its whitespace control uses Python's \s, so a native rendering must strip
// exactly these characters: U+00A0 and U+3000 are whitespace, U+200B is not.
#pragma once

#include <cstddef>
#include <string_view>

namespace pulse {

// The byte length of the whitespace character `text` starts (ends) with; 0 when it does not.
size_t LeadingPythonSpace(std::string_view text);
size_t TrailingPythonSpace(std::string_view text);

// str.strip() / str.rstrip() / str.lstrip() without arguments.
std::string_view PythonStrip(std::string_view text);
std::string_view PythonRstrip(std::string_view text);
std::string_view PythonLstrip(std::string_view text);

// Whether every character of a non-empty `text` is whitespace (Python's re.fullmatch(r"\s+")).
bool IsAllPythonSpace(std::string_view text);

}  // namespace pulse
