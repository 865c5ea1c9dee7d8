// Untrusted JSON text (config.json, safetensors headers and indexes, tokenizer files) parsed
// with nlohmann::json, its nesting bounded first: every later walk, copy, dump or destruction of
// a value recurses as deep as the value nests, so a deeper document is refused before any value
// is built, and no file can exhaust the stack.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/base/status.h"
#include "nlohmann/json.hpp"

namespace pulse {

// Arrays and objects nested deeper than this are refused: real files nest a handful deep.
inline constexpr int kMaxJsonDepth = 64;
// JSON files read whole (config.json, safetensors indexes) larger than this are refused before
// they are read: real ones are kilobytes to a few megabytes.
inline constexpr size_t kMaxJsonFileBytes = size_t{64} << 20;

// The value of `text`. InvalidArgument, prefixed with `what` (say the file's path), for text that
// is not JSON or nests deeper than kMaxJsonDepth.
absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view what);

}  // namespace pulse
