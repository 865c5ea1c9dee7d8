// Text to tokens for the entry points that take text: the flag checks and the "no tokenizer"
// error in one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"

namespace pulse::capi {

// Unimplemented when `tokenizer` is null; InvalidArgument for text NULL with text_len > 0 or
// unknown flag bits (PULSE_TOKENIZE_*).
absl::StatusOr<std::vector<int32_t>> EncodeText(const Tokenizer* tokenizer, const char* text,
                                                size_t text_len, uint32_t flags);

// Unimplemented when `tokenizer` is null.
absl::Status CheckTokenizer(const Tokenizer* tokenizer);

}  // namespace pulse::capi
