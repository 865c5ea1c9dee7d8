#include "core/tokenizer/special_tokens.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

std::vector<std::string> Describe(const std::vector<TextSegment>& segments) {
  std::vector<std::string> out;
  for (const TextSegment& segment : segments) {
    out.push_back(segment.id >= 0 ? "#" + std::to_string(segment.id) : std::string(segment.text));
  }
  return out;
}

class SpecialTokenMatcherTest : public ::testing::Test {
 protected:
  const std::vector<std::string> tokens_ = {"a", "<s>", "<s><t>", "<u>", "<s>", ""};
  const std::vector<TokenKind> kinds_ = {TokenKind::kNormal,      TokenKind::kControl,
                                         TokenKind::kControl,     TokenKind::kUserDefined,
                                         TokenKind::kUserDefined, TokenKind::kControl};
  const SpecialTokenMatcher matcher_{tokens_, kinds_};
};

TEST_F(SpecialTokenMatcherTest, LongestAtTheLeftmostPosition) {
  std::vector<TextSegment> segments;
  matcher_.Split("x<s><t>y<s>z<u>", true, segments);
  EXPECT_EQ(Describe(segments), (std::vector<std::string>{"x", "#2", "y", "#1", "z", "#3"}));
}

TEST_F(SpecialTokenMatcherTest, NormalTokensAreNotMatched) {
  std::vector<TextSegment> segments;
  matcher_.Split("aaa", true, segments);
  EXPECT_EQ(Describe(segments), (std::vector<std::string>{"aaa"}));
}

TEST_F(SpecialTokenMatcherTest, WithoutParsingControlOnlyUserDefinedMatch) {
  // "<s>" is also user-defined id 4 (a later duplicate): it still matches as that.
  std::vector<TextSegment> segments;
  matcher_.Split("<s><t><u>", false, segments);
  EXPECT_EQ(Describe(segments), (std::vector<std::string>{"#4", "<t>", "#3"}));
}

TEST_F(SpecialTokenMatcherTest, EmptyText) {
  std::vector<TextSegment> segments;
  matcher_.Split("", true, segments);
  EXPECT_TRUE(segments.empty());
}

}  // namespace
}  // namespace pulse
