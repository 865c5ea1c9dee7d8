#include "core/text/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace pulse {
namespace {

TEST(CompleteUtf8PrefixTest, HoldsBackOnlyAnIncompleteLastCharacter) {
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  const std::string euro = "\xE2\x82\xAC";  // U+20AC
  EXPECT_EQ(CompleteUtf8Prefix("a" + euro), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + euro.substr(0, 1)), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + euro.substr(0, 2)), 1u);
  const std::string smile = "\xF0\x9F\x98\x80";  // U+1F600
  for (size_t cut = 1; cut < 4; ++cut) {
    EXPECT_EQ(CompleteUtf8Prefix(euro + smile.substr(0, cut)), 3u) << cut;
  }
  EXPECT_EQ(CompleteUtf8Prefix(euro + smile), 7u);
}

TEST(CompleteUtf8PrefixTest, NeverHoldsBackBytesThatCannotBecomeValid) {
  EXPECT_EQ(CompleteUtf8Prefix("a\x80"), 2u);      // stray continuation byte
  EXPECT_EQ(CompleteUtf8Prefix("a\xC0"), 2u);      // overlong lead
  EXPECT_EQ(CompleteUtf8Prefix("a\xFF"), 2u);      // never in UTF-8
  EXPECT_EQ(CompleteUtf8Prefix("a\xE0\x80"), 3u);  // overlong three-byte form
  EXPECT_EQ(CompleteUtf8Prefix("a\xED\xA0"), 3u);  // a surrogate
  EXPECT_EQ(CompleteUtf8Prefix("a\xF4\x90"), 3u);  // above U+10FFFF
  EXPECT_EQ(CompleteUtf8Prefix("a\xE2"
                               "b"),
            3u);  // a lead cut short by ASCII
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F"
                               "\xE2"),
            3u);  // a lead cut short by another lead
}

}  // namespace
}  // namespace pulse
