// The size-query convention of the header's output buffers: a result that does not fit writes
// only the size it needs and returns PULSE_BUFFER_TOO_SMALL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pulseinfer/pulseinfer.h"

namespace pulse::capi {

// InvalidArgument when buffer is NULL with capacity > 0.
absl::Status CheckBuffer(const void* buffer, size_t capacity, absl::string_view name);

// Writes `text` and a NUL into buffer[capacity], or only its length; *out_len = text.size().
absl::StatusOr<pulse_status> WriteText(std::string_view text, char* buffer, size_t capacity,
                                       size_t* out_len, absl::string_view function);

// Writes `tokens` into buffer[capacity], or only their count; *out_count = tokens.size().
absl::StatusOr<pulse_status> WriteTokens(std::span<const int32_t> tokens, int32_t* buffer,
                                         size_t capacity, size_t* out_count,
                                         absl::string_view function);

}  // namespace pulse::capi
