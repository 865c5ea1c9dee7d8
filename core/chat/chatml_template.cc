// ChatML: "<|im_start|>ROLE\nCONTENT<|im_end|>\n" a message and "<|im_start|>assistant\n" as the
// generation prompt; SmolLM2 and Qwen2 add a default system message when the first message is
// not one.
#include <array>
#include <optional>
#include <string>

#include "core/chat/chat_families.h"
#include "core/chat/template_pattern.h"

namespace pulse {
namespace {

// SmolLM2-Instruct, Qwen2-Instruct, Qwen1.5-Chat (their default system messages differ).
constexpr std::string_view kWithDefaultSystem =
    R"jinja({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n@@system@@<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})jinja";

// OpenHermes and many fine-tunes; the second is the form with a guard for a missing
// add_generation_prompt (always defined here).
constexpr std::array<std::string_view, 2> kPlain = {
    R"jinja({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})jinja",
    R"jinja({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})jinja",
};

void AppendChatMl(std::string& text, std::string_view role, std::string_view content) {
  text.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
}

class ChatMlTemplate final : public ChatTemplate {
 public:
  explicit ChatMlTemplate(std::optional<std::string> default_system)
      : default_system_(std::move(default_system)) {}

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const override {
    std::string text;
    if (default_system_.has_value() && !messages.empty() && messages[0].role != "system") {
      AppendChatMl(text, "system", *default_system_);
    }
    for (const ChatMessage& message : messages) AppendChatMl(text, message.role, message.content);
    if (add_generation_prompt) text.append("<|im_start|>assistant\n");
    return text;
  }
  std::string_view family() const override { return "chatml"; }

 private:
  const std::optional<std::string> default_system_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> RecognizeChatMl(
    std::span<const JinjaToken> canonical) {
  PULSE_ASSIGN_OR_RETURN(const std::optional<TemplateCaptures> with_default,
                         MatchReference(kWithDefaultSystem, canonical));
  if (with_default.has_value()) {
    return std::make_unique<ChatMlTemplate>(std::string(Captured(*with_default, "system")));
  }
  for (const std::string_view reference : kPlain) {
    PULSE_ASSIGN_OR_RETURN(const std::optional<TemplateCaptures> plain,
                           MatchReference(reference, canonical));
    if (plain.has_value()) return std::make_unique<ChatMlTemplate>(std::nullopt);
  }
  return nullptr;
}

}  // namespace pulse
