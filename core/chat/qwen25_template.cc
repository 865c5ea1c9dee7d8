// Qwen2.5's ChatML template with tool support, for conversations without tools: a system block
// first (the conversation's own system message or the default), then ChatML messages; a "tool"
// message goes into a user turn of <tool_response> blocks, and any other role renders nothing.
#include <optional>
#include <string>

#include "core/chat/chat_families.h"
#include "core/chat/template_pattern.h"

namespace pulse {
namespace {

// Qwen2.5-Instruct (7B and the other sizes; Coder and Math differ in the default message).
constexpr std::string_view kQwen25 = R"jinja(
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- '@@tools_system@@' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\n@@system@@<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)jinja";

void AppendChatMl(std::string& text, std::string_view role, std::string_view content) {
  text.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
}

class Qwen25Template final : public ChatTemplate {
 public:
  explicit Qwen25Template(std::string default_system)
      : default_system_(std::move(default_system)) {}

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const override {
    if (messages.empty()) return EmptyConversationError();
    std::string text;
    const bool has_system = messages[0].role == "system";
    AppendChatMl(text, "system", has_system ? messages[0].content : default_system_);
    for (size_t i = 0; i < messages.size(); ++i) {
      const std::string_view role = messages[i].role;
      if (role == "user" || role == "assistant" || (role == "system" && i > 0)) {
        AppendChatMl(text, role, messages[i].content);
      } else if (role == "tool") {
        if (i == 0 || messages[i - 1].role != "tool") text.append("<|im_start|>user");
        text.append("\n<tool_response>\n").append(messages[i].content);
        text.append("\n</tool_response>");
        if (i + 1 == messages.size() || messages[i + 1].role != "tool") {
          text.append("<|im_end|>\n");
        }
      }
    }
    if (add_generation_prompt) text.append("<|im_start|>assistant\n");
    return text;
  }
  std::string_view family() const override { return "qwen2.5"; }

 private:
  const std::string default_system_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> RecognizeQwen25(
    std::span<const JinjaToken> canonical) {
  PULSE_ASSIGN_OR_RETURN(const std::optional<TemplateCaptures> captures,
                         MatchReference(kQwen25, canonical));
  if (!captures.has_value()) return nullptr;
  return std::make_unique<Qwen25Template>(std::string(Captured(*captures, "system")));
}

}  // namespace pulse
