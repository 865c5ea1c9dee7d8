#include "core/text/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace pulse {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) {
  for (std::string& stop : stop_strings) {
    if (!stop.empty()) stop_strings_.push_back(std::move(stop));
  }
}

StopMatcher::Result StopMatcher::Add(std::string_view piece) {
  Result result;
  if (stopped_) return result;
  held_.append(piece);
  size_t first = std::string::npos;
  for (const std::string& stop : stop_strings_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    result.text = held_.substr(0, first);
    result.stopped = stopped_ = true;
    held_.clear();
    return result;
  }
  const size_t keep = PartialMatchLength();
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopMatcher::Flush() { return std::exchange(held_, {}); }

size_t StopMatcher::PartialMatchLength() const {
  size_t longest = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t most = std::min(stop.size() - 1, held_.size());
    for (size_t length = most; length > longest; --length) {
      if (std::string_view(held_).substr(held_.size() - length) ==
          std::string_view(stop).substr(0, length)) {
        longest = length;
        break;
      }
    }
  }
  return longest;
}

}  // namespace pulse
