// pulse-chat-template: renders a conversation with a chat template, for the Python tests.
//
//   pulse-chat-template INPUT.json
//
// INPUT.json: {"template": str, "bos_token": str, "eos_token": str, "add_generation_prompt": bool,
// "messages": [{"role": str, "content": str}, ...]}. Writes the rendered prompt to stdout, byte
// for byte; on a failure, the status (its code name first) on stderr and exit code 1.
// INPUT.json may also be an array of such objects: then stdout is a JSON array with, for each,
// {"family": str, "text": str} or {"error": "CODE: message"}, and only bad input fails the run.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/chat/chat_template.h"
#include "nlohmann/json.hpp"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

struct Case {
  std::string template_source;
  std::string bos_token;
  std::string eos_token;
  bool add_generation_prompt = false;
  std::vector<std::pair<std::string, std::string>> messages;  // role, content
};

struct Args {
  std::vector<Case> cases;
  bool batch = false;
};

absl::StatusOr<std::string> StringField(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    return absl::InvalidArgumentError(std::string("input: \"") + key + "\" must be a string");
  }
  return it->get<std::string>();
}

absl::StatusOr<Case> ParseCase(const nlohmann::json& input) {
  if (!input.is_object()) return absl::InvalidArgumentError("input: a case is not an object");
  Case args;
  PULSE_ASSIGN_OR_RETURN(args.template_source, StringField(input, "template"));
  PULSE_ASSIGN_OR_RETURN(args.bos_token, StringField(input, "bos_token"));
  PULSE_ASSIGN_OR_RETURN(args.eos_token, StringField(input, "eos_token"));
  const auto generation = input.find("add_generation_prompt");
  if (generation == input.end() || !generation->is_boolean()) {
    return absl::InvalidArgumentError("input: \"add_generation_prompt\" must be a boolean");
  }
  args.add_generation_prompt = generation->get<bool>();
  const auto messages = input.find("messages");
  if (messages == input.end() || !messages->is_array()) {
    return absl::InvalidArgumentError("input: \"messages\" must be an array");
  }
  for (const nlohmann::json& message : *messages) {
    if (!message.is_object())
      return absl::InvalidArgumentError("input: a message is not an object");
    PULSE_ASSIGN_OR_RETURN(std::string role, StringField(message, "role"));
    PULSE_ASSIGN_OR_RETURN(std::string content, StringField(message, "content"));
    args.messages.emplace_back(std::move(role), std::move(content));
  }
  return args;
}

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  if (argc != 2) return absl::InvalidArgumentError("expected one argument, the input JSON file");
  std::ifstream file(argv[1], std::ios::binary);
  if (!file) return absl::NotFoundError(std::string("cannot read '") + argv[1] + "'");
  std::stringstream text;
  text << file.rdbuf();
  const nlohmann::json input = nlohmann::json::parse(text.str(), nullptr, false);
  if (input.is_discarded()) {
    return absl::InvalidArgumentError(std::string("'") + argv[1] + "' is not JSON");
  }
  Args args;
  args.batch = input.is_array();
  for (const nlohmann::json& one : args.batch ? input : nlohmann::json::array({input})) {
    PULSE_ASSIGN_OR_RETURN(Case parsed, ParseCase(one));
    args.cases.push_back(std::move(parsed));
  }
  return args;
}

struct Rendering {
  std::string family;
  std::string text;
};

absl::StatusOr<Rendering> Render(const Case& one) {
  PULSE_ASSIGN_OR_RETURN(
      const std::unique_ptr<ChatTemplate> chat,
      ChatTemplate::Recognize(one.template_source, one.bos_token, one.eos_token));
  std::vector<ChatMessage> messages;
  for (const auto& [role, content] : one.messages) messages.push_back({role, content});
  PULSE_ASSIGN_OR_RETURN(std::string text, chat->Render(messages, one.add_generation_prompt));
  return Rendering{std::string(chat->family()), std::move(text)};
}

absl::Status Write(std::string_view bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size()) {
    return absl::InternalError("cannot write the rendered text to stdout");
  }
  return absl::OkStatus();
}

absl::Status Run(const Args& args) {
  if (!args.batch) {
    PULSE_ASSIGN_OR_RETURN(const Rendering rendering, Render(args.cases[0]));
    std::fprintf(stderr, "family: %s\n", rendering.family.c_str());
    return Write(rendering.text);
  }
  nlohmann::json results = nlohmann::json::array();
  for (const Case& one : args.cases) {
    const absl::StatusOr<Rendering> rendering = Render(one);
    if (rendering.ok()) {
      results.push_back({{"family", rendering->family}, {"text", rendering->text}});
    } else {
      results.push_back({{"error", rendering.status().ToString()}});
    }
  }
  return Write(results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-chat-template", "usage: pulse-chat-template INPUT.json",
                        pulse::ParseArgs(argc, argv), pulse::Run);
}
