#include "core/format/json_text.h"

#include "absl/strings/str_format.h"

namespace pulse {
namespace {

// The deepest nesting of arrays and objects in `text`, counting only brackets outside strings,
// stopping once it passes `limit`.
int NestingDepth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view what) {
  if (NestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: JSON nested more than %d arrays or objects deep", what, kMaxJsonDepth));
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: bad JSON: %s", what, e.what()));
  }
}

}  // namespace pulse
