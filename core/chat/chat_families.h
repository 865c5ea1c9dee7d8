// The template families ChatTemplate::Recognize tries, in order. Each returns its template when
// `canonical` (CanonicalTemplate of the model's source) has the structure of one of the family's
// reference templates, nullptr when it has none of them.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "core/base/status.h"
#include "core/chat/chat_template.h"
#include "core/chat/jinja_lexer.h"

namespace pulse {

// SmolLM2 / Qwen2 (a default system message), plain ChatML.
absl::StatusOr<std::unique_ptr<ChatTemplate>> RecognizeChatMl(
    std::span<const JinjaToken> canonical);
// Qwen2.5's ChatML with tool support (rendered for conversations without tools).
absl::StatusOr<std::unique_ptr<ChatTemplate>> RecognizeQwen25(
    std::span<const JinjaToken> canonical);
// Meta Llama 3 and Llama 3.1 (tool-free conversations).
absl::StatusOr<std::unique_ptr<ChatTemplate>> RecognizeLlama3(std::span<const JinjaToken> canonical,
                                                              std::string_view bos_token);
// Mistral Instruct v0.1/v0.2 and v0.3 (tool-free conversations).
absl::StatusOr<std::unique_ptr<ChatTemplate>> RecognizeMistral(
    std::span<const JinjaToken> canonical, std::string_view bos_token, std::string_view eos_token);

// What Jinja raises where a template reads messages[0]['role'] of an empty conversation.
inline absl::Status EmptyConversationError() {
  return absl::InvalidArgumentError(
      "the chat template reads the first message, but there are no messages");
}

// Unimplemented for a role that only the template's tool branches render (we do not render
// tool calls or results).
absl::Status ToolRoleError(std::string_view family, std::string_view role);

}  // namespace pulse
