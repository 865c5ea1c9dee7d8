#include "core/tokenizer/pre_tokenizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Pieces(std::string_view name, std::string_view text) {
  const auto patterns = PreTokenizerPatterns(name);
  EXPECT_TRUE(patterns.ok()) << patterns.status();
  auto pre_tokenizer = PreTokenizer::Create(*patterns);
  EXPECT_TRUE(pre_tokenizer.ok()) << pre_tokenizer.status();
  std::vector<std::string_view> pieces;
  pre_tokenizer->Split(text, pieces);
  std::string joined;
  for (const std::string_view piece : pieces) joined += piece;
  EXPECT_EQ(joined, text) << "the pieces must cover the text exactly";
  return {pieces.begin(), pieces.end()};
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_THAT(Pieces("gpt2", "Hello world's  1234!\n"),
              ElementsAre("Hello", " world", "'s", " ", " 1234", "!", "\n"));
}

TEST(PreTokenizer, SmolLmSplitsDigitsFirst) {
  EXPECT_THAT(Pieces("smollm", "ab 123x"), ElementsAre("ab", " ", "1", "2", "3", "x"));
}

TEST(PreTokenizer, Llama3GroupsThreeDigitsAndIgnoresCaseOfContractions) {
  EXPECT_THAT(Pieces("llama-bpe", "I'M 12345"), ElementsAre("I", "'M", " ", "123", "45"));
  EXPECT_THAT(Pieces("llama3", "I'M 12345"), ElementsAre("I", "'M", " ", "123", "45"));
}

TEST(PreTokenizer, Qwen2SplitsDigitsSingly) {
  EXPECT_THAT(Pieces("qwen2", "x 123"), ElementsAre("x", " ", "1", "2", "3"));
}

TEST(PreTokenizer, UnicodeLettersAndSpaces) {
  // U+00A0 is whitespace to \s under UCP; "é" is a letter.
  EXPECT_THAT(Pieces("gpt2", "caf\xC3\xA9\xC2\xA0x"), ElementsAre("caf\xC3\xA9", "\xC2\xA0", "x"));
}

TEST(PreTokenizer, InvalidUtf8NeverMatchesAndIsKept) {
  const std::vector<std::string> pieces = Pieces("gpt2", "ab\xFF\x80 cd");
  EXPECT_THAT(pieces, ElementsAre("ab", "\xFF\x80", " cd"));
}

TEST(PreTokenizer, UnknownNameIsUnimplemented) {
  const auto patterns = PreTokenizerPatterns("falcon");
  EXPECT_EQ(patterns.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(patterns.status().message(), HasSubstr("unsupported pre-tokenizer 'falcon'"));
}

TEST(PreTokenizer, BadRegexIsInvalidArgument) {
  const std::vector<std::string> patterns = {"(unclosed"};
  const auto pre_tokenizer = PreTokenizer::Create(patterns);
  EXPECT_EQ(pre_tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pre_tokenizer.status().message(), HasSubstr("(unclosed"));
}

TEST(PreTokenizer, NameOfPatterns) {
  EXPECT_EQ(PreTokenizerNameOf(*PreTokenizerPatterns("smollm")), "smollm");
  EXPECT_EQ(PreTokenizerNameOf(*PreTokenizerPatterns("llama3")), "llama-bpe");
  const std::vector<std::string> other = {"x"};
  EXPECT_EQ(PreTokenizerNameOf(other), "");
}

}  // namespace
}  // namespace pulse
