// Stop strings over streamed text: text that could still be the start of a stop string is held
// back until the next piece decides it, so a stop string split across tokens is caught and
// never printed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pulse {

class StopMatcher {
 public:
  // Empty strings are ignored.
  explicit StopMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;      // what may be emitted now
    bool stopped = false;  // a stop string was found: `text` ends where it began
  };
  // Adds the next piece of text. After a stop, further calls return nothing.
  Result Add(std::string_view piece);
  // The text held back, at the end of the stream (nothing after a stop).
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  // The length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t PartialMatchLength() const;

  std::vector<std::string> stop_strings_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace pulse
