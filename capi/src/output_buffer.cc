#include "capi/src/output_buffer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "capi/src/status_map.h"

namespace pulse::capi {

absl::Status CheckBuffer(const void* buffer, size_t capacity, absl::string_view name) {
  if (buffer == nullptr && capacity > 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is NULL but capacity is ", capacity));
  }
  return absl::OkStatus();
}

absl::StatusOr<pulse_status> WriteText(std::string_view text, char* buffer, size_t capacity,
                                       size_t* out_len, absl::string_view function) {
  *out_len = text.size();
  if (capacity <= text.size()) {
    return Fail(PULSE_BUFFER_TOO_SMALL, function,
                absl::StrCat("the text has ", text.size(), " bytes and needs a buffer of ",
                             text.size() + 1, " with its NUL; capacity is ", capacity));
  }
  std::copy(text.begin(), text.end(), buffer);
  buffer[text.size()] = '\0';
  return PULSE_OK;
}

absl::StatusOr<pulse_status> WriteTokens(std::span<const int32_t> tokens, int32_t* buffer,
                                         size_t capacity, size_t* out_count,
                                         absl::string_view function) {
  *out_count = tokens.size();
  if (capacity < tokens.size()) {
    return Fail(PULSE_BUFFER_TOO_SMALL, function,
                absl::StrCat("the result has ", tokens.size(), " tokens; capacity is ", capacity));
  }
  std::copy(tokens.begin(), tokens.end(), buffer);
  return PULSE_OK;
}

}  // namespace pulse::capi
