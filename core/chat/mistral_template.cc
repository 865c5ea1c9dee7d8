// Mistral Instruct. v0.1/v0.2: bos_token, then "[INST] USER [/INST]" and "ASSISTANT" + eos_token,
// roles strictly alternating from user. v0.3 (also Mistral-Large-2407): an optional first system
// message that joins the last user message, "[INST] USER[/INST]" and " " + trimmed assistant +
// eos_token; tool messages are skipped by the alternation check.
#include <optional>
#include <string>
#include <utility>

#include "core/chat/chat_families.h"
#include "core/chat/python_strip.h"
#include "core/chat/template_pattern.h"

namespace pulse {
namespace {

// Mistral-7B-Instruct-v0.1 and v0.2, Mixtral-8x7B-Instruct-v0.1.
constexpr std::string_view kMistralV1 =
    R"jinja({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('@@alternate@@') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('@@roles@@') }}{% endif %}{% endfor %})jinja";

// Mistral-7B-Instruct-v0.3.
constexpr std::string_view kMistralV3 = R"jinja(
{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("@@alternate@@") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("@@roles@@") }}
    {%- endif %}
{%- endfor %}
)jinja";

// What both Mistral templates take from their source and the model: the special tokens' text and
// the template's own error messages.
struct MistralStrings {
  std::string bos_token_;
  std::string eos_token_;
  std::string alternate_error_;
  std::string roles_error_;
};

class MistralV1Template final : public ChatTemplate, private MistralStrings {
 public:
  explicit MistralV1Template(MistralStrings strings) : MistralStrings(std::move(strings)) {}

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool /*add_generation_prompt: not used*/) const override {
    std::string text(bos_token_);
    for (size_t i = 0; i < messages.size(); ++i) {
      const std::string_view role = messages[i].role;
      if ((role == "user") != (i % 2 == 0)) return absl::InvalidArgumentError(alternate_error_);
      if (role == "user") {
        text.append("[INST] ").append(messages[i].content).append(" [/INST]");
      } else if (role == "assistant") {
        text.append(messages[i].content).append(eos_token_);
      } else {
        return absl::InvalidArgumentError(roles_error_);
      }
    }
    return text;
  }
  std::string_view family() const override { return "mistral"; }
};

class MistralV3Template final : public ChatTemplate, private MistralStrings {
 public:
  explicit MistralV3Template(MistralStrings strings) : MistralStrings(std::move(strings)) {}

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool /*add_generation_prompt: not used*/) const override {
    if (messages.empty()) return EmptyConversationError();
    std::optional<std::string_view> system;
    if (messages[0].role == "system") {
      system = messages[0].content;
      messages = messages.subspan(1);
    }
    size_t turn = 0;
    for (const ChatMessage& message : messages) {
      if (IsToolRole(message.role)) continue;
      if ((message.role == "user") != (turn % 2 == 0)) {
        return absl::InvalidArgumentError(alternate_error_);
      }
      ++turn;
    }
    std::string text(bos_token_);
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& message = messages[i];
      if (message.role == "user") {
        text.append("[INST] ");
        if (i + 1 == messages.size() && system.has_value()) text.append(*system).append("\n\n");
        text.append(message.content).append("[/INST]");
      } else if (message.role == "assistant") {
        text.append(" ").append(PythonStrip(message.content)).append(eos_token_);
      } else if (IsToolRole(message.role)) {
        return ToolRoleError(family(), message.role);
      } else {
        return absl::InvalidArgumentError(roles_error_);
      }
    }
    return text;
  }
  std::string_view family() const override { return "mistral-v3"; }

 private:
  static bool IsToolRole(std::string_view role) { return role == "tool" || role == "tool_results"; }
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> RecognizeMistral(
    std::span<const JinjaToken> canonical, std::string_view bos_token, std::string_view eos_token) {
  PULSE_ASSIGN_OR_RETURN(const std::optional<TemplateCaptures> v1,
                         MatchReference(kMistralV1, canonical));
  if (v1.has_value()) {
    return std::make_unique<MistralV1Template>(MistralStrings{
        std::string(bos_token), std::string(eos_token), std::string(Captured(*v1, "alternate")),
        std::string(Captured(*v1, "roles"))});
  }
  PULSE_ASSIGN_OR_RETURN(const std::optional<TemplateCaptures> v3,
                         MatchReference(kMistralV3, canonical));
  if (!v3.has_value()) return nullptr;
  return std::make_unique<MistralV3Template>(
      MistralStrings{std::string(bos_token), std::string(eos_token),
                     std::string(Captured(*v3, "alternate")), std::string(Captured(*v3, "roles"))});
}

}  // namespace pulse
