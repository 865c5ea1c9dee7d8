// Text to tokens for the entry points that take text (the flag checks and the "no tokenizer"
// error in one place), and chat messages to the template's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chat/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "pulseinfer/pulseinfer.h"

namespace pulse::capi {

// Unimplemented when `tokenizer` is null; InvalidArgument for text NULL with text_len > 0 or
// unknown flag bits (PULSE_TOKENIZE_*).
absl::StatusOr<std::vector<int32_t>> EncodeText(const Tokenizer* tokenizer, const char* text,
                                                size_t text_len, uint32_t flags);

// Unimplemented when `tokenizer` is null.
absl::Status CheckTokenizer(const Tokenizer* tokenizer);

// The ABI's messages[count] rendered by `chat_template` (a model's: its status says why it has
// none). InvalidArgument for messages NULL with count > 0, or a NULL role or content.
absl::StatusOr<std::string> RenderChat(
    const absl::StatusOr<std::shared_ptr<const ChatTemplate>>& chat_template,
    const pulse_chat_message* messages, size_t count, bool add_generation_prompt);

}  // namespace pulse::capi
