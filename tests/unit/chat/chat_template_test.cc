#include "core/chat/chat_template.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

// A template as a model ships it, from tests/unit/chat/templates/.
std::string Fixture(const std::string& name) {
  const char* root = std::getenv("PULSE_SOURCE_DIR");
  const std::string path =
      std::string(root != nullptr ? root : ".") + "/tests/unit/chat/templates/" + name + ".jinja";
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.good()) << "cannot read " << path;
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::unique_ptr<ChatTemplate> Recognized(const std::string& name, std::string_view bos = "<s>",
                                         std::string_view eos = "</s>") {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat =
      ChatTemplate::Recognize(Fixture(name), bos, eos);
  EXPECT_TRUE(chat.ok()) << name << ": " << chat.status();
  return chat.ok() ? *std::move(chat) : nullptr;
}

const std::vector<ChatMessage> kChat = {
    {"system", " Be brief. "}, {"user", "Hi\n"}, {"assistant", " Hello! "}, {"user", "2+2?"}};
const std::vector<ChatMessage> kNoSystem = {{"user", "Hi"}, {"assistant", "Hello"}};

TEST(ChatTemplateTest, EachFixtureIsItsFamily) {
  const std::vector<std::pair<std::string, std::string_view>> fixtures = {
      {"smollm2-instruct", "chatml"},
      {"qwen2-instruct", "chatml"},
      {"openhermes-2.5-chatml", "chatml"},
      {"qwen2.5-7b-instruct", "qwen2.5"},
      {"qwen2.5-coder-instruct", "qwen2.5"},
      {"llama3-8b-instruct", "llama3"},
      {"llama3.1-8b-instruct", "llama3.1"},
      {"mistral-7b-instruct-v0.2", "mistral"},
      {"mistral-7b-instruct-v0.3", "mistral-v3"}};
  for (const auto& [name, family] : fixtures) {
    const std::unique_ptr<ChatTemplate> chat = Recognized(name);
    ASSERT_NE(chat, nullptr) << name;
    EXPECT_EQ(chat->family(), family) << name;
  }
}

TEST(ChatTemplateTest, ChatMlDefaultSystemMessageOnlyWhenTheFirstIsNotSystem) {
  const auto smollm = Recognized("smollm2-instruct");
  ASSERT_NE(smollm, nullptr);
  EXPECT_EQ(*smollm->Render(kNoSystem, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>"
            "\n<|im_start|>assistant\n");
  EXPECT_EQ(*smollm->Render(std::span(kChat).first(2), false),
            "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\nHi\n<|im_end|>\n");
  EXPECT_EQ(*smollm->Render({}, true), "<|im_start|>assistant\n");
  const auto qwen2 = Recognized("qwen2-instruct");
  ASSERT_NE(qwen2, nullptr);
  EXPECT_EQ(*qwen2->Render(std::span(kNoSystem).first(1), false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"
            "<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen25UsesItsDefaultSystemAndReadsTheFirstMessage) {
  const auto qwen = Recognized("qwen2.5-7b-instruct");
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(*qwen->Render(std::span(kNoSystem).first(1), true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(absl::IsInvalidArgument(qwen->Render({}, true).status()));
}

TEST(ChatTemplateTest, Llama3TrimsContentAndPutsBosFirst) {
  const auto llama = Recognized("llama3-8b-instruct", "<|begin_of_text|>");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(*llama->Render(std::span(kChat).first(3), true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
            "\n\n");
}

TEST(ChatTemplateTest, Llama31AlwaysOpensWithItsDatedSystemBlock) {
  const auto llama = Recognized("llama3.1-8b-instruct", "<|begin_of_text|>");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(*llama->Render(std::span(kNoSystem).first(1), false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
            "Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi<|eot_id|>");
  const std::vector<ChatMessage> tool = {{"user", "Hi"}, {"tool", "42"}};
  EXPECT_TRUE(absl::IsUnimplemented(llama->Render(tool, true).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(llama->Render({}, true).status()));
}

TEST(ChatTemplateTest, MistralRaisesWhereItsTemplateRaises) {
  const auto mistral = Recognized("mistral-7b-instruct-v0.2");
  ASSERT_NE(mistral, nullptr);
  EXPECT_EQ(*mistral->Render(kNoSystem, true), "<s>[INST] Hi [/INST]Hello</s>");
  const absl::Status alternate = mistral->Render(std::span(kNoSystem).last(1), true).status();
  EXPECT_TRUE(absl::IsInvalidArgument(alternate));
  EXPECT_EQ(alternate.message(),
            "Conversation roles must alternate user/assistant/user/assistant/...");
  const absl::Status roles = mistral->Render(kChat, true).status();
  EXPECT_TRUE(absl::IsInvalidArgument(roles));  // system at index 0 is not user: alternation
  const std::vector<ChatMessage> odd_role = {{"user", "a"}, {"narrator", "b"}};
  EXPECT_EQ(mistral->Render(odd_role, true).status().message(),
            "Only user and assistant roles are supported!");
}

TEST(ChatTemplateTest, MistralV3PutsTheSystemMessageInTheLastUserTurn) {
  const auto mistral = Recognized("mistral-7b-instruct-v0.3");
  ASSERT_NE(mistral, nullptr);
  EXPECT_EQ(*mistral->Render(kChat, true),
            "<s>[INST] Hi\n[/INST] Hello!</s>[INST]  Be brief. \n\n2+2?[/INST]");
  EXPECT_EQ(*mistral->Render(std::span(kChat).first(3), true), "<s>[INST] Hi\n[/INST] Hello!</s>");
  EXPECT_TRUE(absl::IsInvalidArgument(mistral->Render(std::span(kChat).last(2), true).status()));
}

TEST(ChatTemplateTest, AnEmptyTemplateIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(ChatTemplate::Recognize("", "", "").status()));
}

TEST(ChatTemplateTest, OtherTemplatesAreRefusedNotGuessed) {
  for (const std::string name : {"zephyr-7b-beta", "gemma-7b-it", "mistral-nemo-instruct-2407"}) {
    const auto chat = ChatTemplate::Recognize(Fixture(name), "<s>", "</s>");
    ASSERT_TRUE(absl::IsUnimplemented(chat.status())) << name;
    EXPECT_NE(chat.status().message().find("unrecognised chat template"), std::string::npos);
  }
  const auto unknown = ChatTemplate::Recognize("{% for m in messages %}{{ m.content }}", "", "");
  ASSERT_TRUE(absl::IsUnimplemented(unknown.status()));
  EXPECT_NE(unknown.status().message().find("it starts \"{% for m in messages %}"),
            std::string::npos);
  EXPECT_TRUE(absl::IsUnimplemented(ChatTemplate::Recognize("{{ oops", "", "").status()));
  // One token different (a trimmed content) may render differently: refused as well.
  std::string altered = Fixture("openhermes-2.5-chatml");
  altered.replace(altered.find("message['content']"), 18, "message['content'] | trim");
  EXPECT_TRUE(absl::IsUnimplemented(ChatTemplate::Recognize(altered, "", "").status()));
}

TEST(ChatTemplateTest, QuoteAndWhitespaceVariantsAreStillRecognised) {
  const std::string variant =
      "{%- for message in messages -%}\n  {%- if loop.first and messages[0].role != \"system\" %}"
      "<|im_start|>system\nYou are kind.<|im_end|>\n{% endif %}\n"
      "<|im_start|>{{ message.role }}\n{{ message[\"content\"] }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  const auto chat = ChatTemplate::Recognize(variant, "", "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*(*chat)->Render(std::span(kNoSystem).first(1), false),
            "<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

}  // namespace
}  // namespace pulse
