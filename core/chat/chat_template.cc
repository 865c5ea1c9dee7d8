#include "core/chat/chat_template.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/chat/chat_families.h"
#include "core/chat/template_pattern.h"

namespace pulse {
namespace {

absl::Status Unrecognised(std::string_view source, std::string_view why) {
  constexpr size_t kHint = 60;
  const std::string hint =
      absl::CEscape(absl::string_view(source.data(), std::min(source.size(), kHint)));
  return absl::UnimplementedError(absl::StrCat(
      "unrecognised chat template", absl::string_view(why.data(), why.size()),
      " (rendered natively: ChatML as SmolLM2, Qwen2 and Qwen2.5 use, Llama 3 and 3.1, Mistral "
      "Instruct v0.1-v0.3; format the prompt yourself and submit it as text), it starts \"",
      hint, source.size() > kHint ? "...\"" : "\""));
}

}  // namespace

absl::Status ToolRoleError(std::string_view family, std::string_view role) {
  return absl::UnimplementedError(
      absl::StrCat("the ", absl::string_view(family.data(), family.size()),
                   " template renders role '", absl::string_view(role.data(), role.size()),
                   "' in its tool branch, which is not rendered natively"));
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Recognize(std::string_view source,
                                                                      std::string_view bos_token,
                                                                      std::string_view eos_token) {
  if (source.empty()) return absl::NotFoundError("the model has no chat template");
  const absl::StatusOr<std::vector<JinjaToken>> canonical = CanonicalTemplate(source);
  if (!canonical.ok()) {
    return Unrecognised(source, absl::StrCat(" (", canonical.status().message(), ")"));
  }
  PULSE_ASSIGN_OR_RETURN(std::unique_ptr<ChatTemplate> chat, RecognizeChatMl(*canonical));
  if (chat == nullptr) {
    PULSE_ASSIGN_OR_RETURN(chat, RecognizeQwen25(*canonical));
  }
  if (chat == nullptr) {
    PULSE_ASSIGN_OR_RETURN(chat, RecognizeLlama3(*canonical, bos_token));
  }
  if (chat == nullptr) {
    PULSE_ASSIGN_OR_RETURN(chat, RecognizeMistral(*canonical, bos_token, eos_token));
  }
  if (chat == nullptr) return Unrecognised(source, "");
  return chat;
}

}  // namespace pulse
