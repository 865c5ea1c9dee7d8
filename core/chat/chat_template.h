// Chat templates: the model's tokenizer.chat_template (Jinja source) is recognised as one we render
// natively (ChatML as SmolLM2, Qwen2 and OpenHermes use, Qwen2.5, Llama 3 and 3.1, Mistral v0.1 to
// v0.3; conversations without tools), by a normal form of its tokens matched against reference
// templates, and rendered byte for byte as the Jinja template would render it. An unrecognised template is an
// error that says so; callers can always format the prompt themselves and submit it as text.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace pulse {

struct ChatMessage {
  std::string_view role;  // "system", "user", "assistant"
  std::string_view content;
};

class ChatTemplate {
 public:
  // `source` is the Jinja text; bos_token / eos_token are the strings the template's bos_token
  // and eos_token variables hold (empty when the model has none). NotFound when `source` is
  // empty ("the model has no chat template"); Unimplemented ("unrecognised chat template: ...")
  // when it is not a family we render.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Recognize(std::string_view source,
                                                                 std::string_view bos_token,
                                                                 std::string_view eos_token);

  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;
  virtual ~ChatTemplate() = default;

  // The prompt text, as the template renders `messages` with add_generation_prompt.
  // InvalidArgument where the template itself raises (roles that do not alternate, an unknown
  // role) with its message.
  virtual absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                             bool add_generation_prompt) const = 0;
  // "chatml", "llama3", "mistral"...
  virtual std::string_view family() const = 0;

 protected:
  ChatTemplate() = default;
};

}  // namespace pulse
