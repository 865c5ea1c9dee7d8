#include "core/chat/chat_template.h"

#include <array>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pulse {
namespace {

// A ChatML template: "<|im_start|>ROLE\nCONTENT<|im_end|>\n" a message, an optional default
// system message when the first message is not a system one, and "<|im_start|>assistant\n" as
// the generation prompt.
struct ChatMlVariant {
  std::string_view source;          // the template's Jinja text, exactly
  std::string_view default_system;  // empty: none
};

// Templates are recognised by their exact text (the newlines inside their string literals are
// real newline characters, as the models ship them): a template that differs in any byte may render
// differently, and rendering it as a known one could silently change the prompt.
constexpr std::array<ChatMlVariant, 2> kChatMlVariants = {{
    // SmolLM2-Instruct.
    {"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
     "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
     "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
     "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|im_start|>assistant\n' }}{% endif %}",
     "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
    // Plain ChatML.
    {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
     "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|im_start|>assistant\n' }}{% endif %}",
     ""},
}};

class ChatMlTemplate final : public ChatTemplate {
 public:
  explicit ChatMlTemplate(std::string_view default_system) : default_system_(default_system) {}

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const override {
    std::string text;
    if (!default_system_.empty() && !messages.empty() && messages[0].role != "system") {
      Append(text, "system", default_system_);
    }
    for (const ChatMessage& message : messages) Append(text, message.role, message.content);
    if (add_generation_prompt) text += "<|im_start|>assistant\n";
    return text;
  }
  std::string_view family() const override { return "chatml"; }

 private:
  static void Append(std::string& text, std::string_view role, std::string_view content) {
    text.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
  }

  const std::string_view default_system_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Recognize(std::string_view source,
                                                                      std::string_view bos_token,
                                                                      std::string_view eos_token) {
  (void)bos_token;  // no recognised template uses them yet
  (void)eos_token;
  if (source.empty()) return absl::NotFoundError("the model has no chat template");
  for (const ChatMlVariant& variant : kChatMlVariants) {
    if (source == variant.source) return std::make_unique<ChatMlTemplate>(variant.default_system);
  }
  constexpr size_t kHint = 60;
  return absl::UnimplementedError(absl::StrCat(
      "unrecognised chat template (this build renders SmolLM2's and plain ChatML; format the "
      "prompt yourself and submit it as text): '",
      absl::string_view(source.data(), std::min(source.size(), kHint)),
      source.size() > kHint ? "...'" : "'"));
}

}  // namespace pulse
