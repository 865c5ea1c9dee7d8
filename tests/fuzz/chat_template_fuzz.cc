// A chat template and a conversation, both from the input: the template's Jinja source up to
// the first NUL byte, then messages separated by 0x01 bytes, each's first byte choosing its role.
#include <vector>

#include "core/chat/chat_template.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = pulse::fuzz::Text(data, size);
  const size_t end = input.find('\0');
  const std::string_view source = input.substr(0, end);
  absl::StatusOr<std::unique_ptr<pulse::ChatTemplate>> chat =
      pulse::ChatTemplate::Recognize(source, "<s>", "</s>");
  if (!chat.ok()) return 0;
  static constexpr std::string_view kRoles[] = {"system", "user", "assistant", "tool"};
  std::vector<pulse::ChatMessage> messages;
  std::string_view rest = end == std::string_view::npos ? "" : input.substr(end + 1);
  while (!rest.empty()) {
    const size_t next = rest.find('\x01');
    const std::string_view message = rest.substr(0, next);
    if (!message.empty()) {
      messages.push_back({kRoles[static_cast<uint8_t>(message[0]) % 4], message.substr(1)});
    }
    rest = next == std::string_view::npos ? "" : rest.substr(next + 1);
  }
  (void)(*chat)->Render(messages, (size & 1) != 0);
  return 0;
}
