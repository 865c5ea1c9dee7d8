#include "core/chat/chat_template.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

constexpr char kPlainChatMl[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}";

TEST(ChatTemplateTest, PlainChatMlRendersEachMessageAndTheGenerationPrompt) {
  auto chat = ChatTemplate::Recognize(kPlainChatMl, "", "<|im_end|>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ((*chat)->family(), "chatml");
  const std::vector<ChatMessage> messages = {{"user", "Hi"}, {"assistant", "Hello"}};
  EXPECT_EQ(*(*chat)->Render(messages, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*(*chat)->Render(messages, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n");
}

TEST(ChatTemplateTest, AnEmptyTemplateIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(ChatTemplate::Recognize("", "", "").status()));
}

TEST(ChatTemplateTest, AnUnknownOrAlteredTemplateIsRefusedNotGuessed) {
  const std::string zephyr =
      "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + "
      "eos_token }}{% endfor %}";
  const auto unknown = ChatTemplate::Recognize(zephyr, "<s>", "</s>");
  ASSERT_TRUE(absl::IsUnimplemented(unknown.status()));
  EXPECT_NE(unknown.status().message().find("unrecognised chat template"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("{% for message in messages %}"), std::string::npos);
  // One byte different (a trimmed content) may render differently: refused as well.
  std::string altered = kPlainChatMl;
  altered.replace(altered.find("message['content']"), 18, "message['content'] | trim");
  EXPECT_TRUE(absl::IsUnimplemented(ChatTemplate::Recognize(altered, "", "").status()));
}

}  // namespace
}  // namespace pulse
