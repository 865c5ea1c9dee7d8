#include "core/tokenizer/utf8_scan.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

TEST(Utf8SequenceLength, WellFormedSequences) {
  EXPECT_EQ(Utf8SequenceLength("a"), 1u);
  EXPECT_EQ(Utf8SequenceLength(std::string_view("\0", 1)), 1u);
  EXPECT_EQ(Utf8SequenceLength("\xC3\xA9x"), 2u);         // é
  EXPECT_EQ(Utf8SequenceLength("\xE2\x96\x81"), 3u);      // ▁
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\x98\x80"), 4u);  // 😀
  EXPECT_EQ(Utf8SequenceLength("\xF4\x8F\xBF\xBF"), 4u);  // U+10FFFF
}

TEST(Utf8SequenceLength, IllFormedSequences) {
  EXPECT_EQ(Utf8SequenceLength(""), 0u);
  EXPECT_EQ(Utf8SequenceLength("\x80"), 0u);              // stray continuation
  EXPECT_EQ(Utf8SequenceLength("\xC0\xAF"), 0u);          // overlong '/'
  EXPECT_EQ(Utf8SequenceLength("\xE0\x80\xAF"), 0u);      // overlong
  EXPECT_EQ(Utf8SequenceLength("\xED\xA0\x80"), 0u);      // surrogate U+D800
  EXPECT_EQ(Utf8SequenceLength("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(Utf8SequenceLength("\xE2\x82"), 0u);          // truncated
  EXPECT_EQ(Utf8SequenceLength("\xE2\x82x"), 0u);
  EXPECT_EQ(Utf8SequenceLength("\xFF"), 0u);
}

TEST(ForEachUtf8Run, SplitsAtEachInvalidByte) {
  std::vector<std::string> parts;
  ForEachUtf8Run(
      "ab\x80\xE2\x82"
      "c\xC3\xA9",
      [&](std::string_view run) { parts.push_back("V:" + std::string(run)); },
      [&](std::string_view byte) { parts.push_back("I:" + std::string(byte)); });
  EXPECT_EQ(parts, (std::vector<std::string>{"V:ab", "I:\x80", "I:\xE2", "I:\x82", "V:c\xC3\xA9"}));
}

}  // namespace
}  // namespace pulse
