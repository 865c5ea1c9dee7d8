// Meta Llama 3: "<|start_header_id|>ROLE<|end_header_id|>\n\n" + trimmed content + "<|eot_id|>"
// a message, bos_token before the first. Llama 3.1 always opens with a system block that holds
// its knowledge cutoff and date lines and the conversation's own (trimmed) system message.
#include <optional>
#include <string>

#include "core/chat/chat_families.h"
#include "core/chat/python_strip.h"
#include "core/chat/template_pattern.h"

namespace pulse {
namespace {

// Meta-Llama-3-8B-Instruct (and 70B).
constexpr std::string_view kLlama3 =
    R"jinja({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})jinja";

// Llama-3.1-8B-Instruct (and 70B, 405B; Llama 3.3 ships it too).
constexpr std::string_view kLlama31 = R"jinja(
{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "@@date@@" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: @@knowledge_date@@\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)jinja";

void AppendMessage(std::string& text, std::string_view role, std::string_view content) {
  text.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n");
  text.append(PythonStrip(content)).append("<|eot_id|>");
}

constexpr std::string_view kGenerationPrompt = "<|start_header_id|>assistant<|end_header_id|>\n\n";

class Llama3Template final : public ChatTemplate {
 public:
  explicit Llama3Template(std::string_view bos_token) : bos_token_(bos_token) {}

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const override {
    std::string text;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) text.append(bos_token_);
      AppendMessage(text, messages[i].role, messages[i].content);
    }
    if (add_generation_prompt) text.append(kGenerationPrompt);
    return text;
  }
  std::string_view family() const override { return "llama3"; }

 private:
  const std::string bos_token_;
};

class Llama31Template final : public ChatTemplate {
 public:
  Llama31Template(std::string_view bos_token, std::string_view knowledge_date,
                  std::string_view date)
      : bos_token_(bos_token), knowledge_date_(knowledge_date), date_(date) {}

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const override {
    if (messages.empty()) return EmptyConversationError();
    const bool has_system = messages[0].role == "system";
    const std::string_view system = has_system ? PythonStrip(messages[0].content) : "";
    if (has_system) messages = messages.subspan(1);
    for (const ChatMessage& message : messages) {
      if (message.role == "tool" || message.role == "ipython") {
        return ToolRoleError(family(), message.role);
      }
    }
    std::string text(bos_token_);
    text.append("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: ");
    text.append(knowledge_date_).append("\nToday Date: ").append(date_).append("\n\n");
    text.append(system).append("<|eot_id|>");
    for (const ChatMessage& message : messages) {
      AppendMessage(text, message.role, message.content);
    }
    if (add_generation_prompt) text.append(kGenerationPrompt);
    return text;
  }
  std::string_view family() const override { return "llama3.1"; }

 private:
  const std::string bos_token_;
  const std::string knowledge_date_;
  const std::string date_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> RecognizeLlama3(std::span<const JinjaToken> canonical,
                                                              std::string_view bos_token) {
  PULSE_ASSIGN_OR_RETURN(const std::optional<TemplateCaptures> llama3,
                         MatchReference(kLlama3, canonical));
  if (llama3.has_value()) return std::make_unique<Llama3Template>(bos_token);
  PULSE_ASSIGN_OR_RETURN(const std::optional<TemplateCaptures> llama31,
                         MatchReference(kLlama31, canonical));
  if (!llama31.has_value()) return nullptr;
  return std::make_unique<Llama31Template>(bos_token, Captured(*llama31, "knowledge_date"),
                                           Captured(*llama31, "date"));
}

}  // namespace pulse
