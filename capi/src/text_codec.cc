#include "capi/src/text_codec.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "pulseinfer/pulseinfer.h"

namespace pulse::capi {

absl::Status CheckTokenizer(const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) {
    return absl::UnimplementedError(
        "the model has no tokenizer (random weights, or no tokenizer.json beside the weights)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> EncodeText(const Tokenizer* tokenizer, const char* text,
                                                size_t text_len, uint32_t flags) {
  if (text == nullptr && text_len > 0) {
    return absl::InvalidArgumentError(absl::StrCat("text is NULL but text_len is ", text_len));
  }
  if ((flags & ~PULSE_TOKENIZE_DEFAULT) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tokenize flags 0x", absl::Hex(flags & ~PULSE_TOKENIZE_DEFAULT)));
  }
  PULSE_RETURN_IF_ERROR(CheckTokenizer(tokenizer));
  const EncodeOptions options{.add_special = (flags & PULSE_TOKENIZE_ADD_SPECIAL) != 0,
                              .parse_special = (flags & PULSE_TOKENIZE_PARSE_SPECIAL) != 0};
  return tokenizer->Encode(text_len == 0 ? std::string_view() : std::string_view(text, text_len),
                           options);
}

absl::StatusOr<std::string> RenderChat(
    const absl::StatusOr<std::shared_ptr<const ChatTemplate>>& chat_template,
    const pulse_chat_message* messages, size_t count, bool add_generation_prompt) {
  if (messages == nullptr && count > 0) {
    return absl::InvalidArgumentError(absl::StrCat("messages is NULL but count is ", count));
  }
  std::vector<ChatMessage> conversation;
  conversation.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (messages[i].role == nullptr || messages[i].content == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "] has a NULL ", messages[i].role == nullptr ? "role" : "content"));
    }
    conversation.push_back({messages[i].role, messages[i].content});
  }
  if (!chat_template.ok()) return chat_template.status();
  return (*chat_template)->Render(conversation, add_generation_prompt);
}

}  // namespace pulse::capi
