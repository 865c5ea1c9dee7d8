#include "core/chat/jinja_lexer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

using Kind = JinjaTokenKind;

// The text tokens only, joined: what the template outputs outside its tags.
std::string TextOf(std::string_view source) {
  const absl::StatusOr<std::vector<JinjaToken>> tokens = LexJinja(source);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  if (!tokens.ok()) return "<error>";
  std::string text;
  for (const JinjaToken& token : *tokens) {
    if (token.kind == Kind::kText) text += "[" + token.value + "]";
  }
  return text;
}

TEST(JinjaLexerTest, TrimBlocksRemovesOneNewlineAfterABlockOrComment) {
  EXPECT_EQ(TextOf("{% if x %}\n\nA{% endif %}\nB"), "[\nA][B]");
  EXPECT_EQ(TextOf("{# note #}\nA"), "[A]");
  EXPECT_EQ(TextOf("{{ x }}\nA"), "[\nA]");  // not after an expression
  EXPECT_EQ(TextOf("{% if x +%}\nA{% endif %}"), "[\nA]");
}

TEST(JinjaLexerTest, LstripBlocksRemovesIndentationBeforeABlockOnItsLine) {
  EXPECT_EQ(TextOf("A\n   {% if x %}B{% endif %}"), "[A\n][B]");
  EXPECT_EQ(TextOf("  {% if x %}B{% endif %}"), "[B]");        // the template's first line
  EXPECT_EQ(TextOf("A  {% if x %}B{% endif %}"), "[A  ][B]");  // not at a line start
  EXPECT_EQ(TextOf("A\n  {{ x }}"), "[A\n  ]");                // not before an expression
  EXPECT_EQ(TextOf("A\n  {%+ if x %}{% endif %}"), "[A\n  ]");
  EXPECT_EQ(TextOf("{% if x %}\n  {% if y %}{% endif %}{% endif %}"), "");
}

TEST(JinjaLexerTest, MinusSignsStripAllWhitespaceOnTheirSide) {
  EXPECT_EQ(TextOf("A \n\t {{- x -}} \n B"), "[A][B]");
  EXPECT_EQ(TextOf("A\xe3\x80\x80{%- if x -%}\xc2\xa0"
                   "B{% endif %}"),
            "[A][B]");
  EXPECT_EQ(TextOf("A \n {#- c -#} \n B"), "[A][B]");
}

TEST(JinjaLexerTest, NewlinesAreNormalisedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(TextOf("A\r\nB\rC\n"), "[A\nB\nC]");
  EXPECT_EQ(TextOf("A\n\n"), "[A\n]");
}

TEST(JinjaLexerTest, TagTokensWithDecodedStrings) {
  const auto tokens = LexJinja(R"({{ 'a\n\'b' + "c\"\u00e9\x41" ~ x.y[0] }})");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const std::vector<JinjaToken> expected = {{Kind::kVariableBegin, ""},
                                            {Kind::kString, "a\n'b"},
                                            {Kind::kOperator, "+"},
                                            {Kind::kString,
                                             "c\"\xc3\xa9"
                                             "A"},
                                            {Kind::kOperator, "~"},
                                            {Kind::kName, "x"},
                                            {Kind::kOperator, "."},
                                            {Kind::kName, "y"},
                                            {Kind::kOperator, "["},
                                            {Kind::kNumber, "0"},
                                            {Kind::kOperator, "]"},
                                            {Kind::kVariableEnd, ""}};
  EXPECT_EQ(*tokens, expected);
}

TEST(JinjaLexerTest, BadSourcesAreErrorsNotCrashes) {
  for (const std::string_view bad :
       {"{{ x", "{% if x", "{# open", "{{ 'open }}", "{{ (x }}", "{{ x) }}", "{{ x ] }}", "{{ $ }}",
        "{{ '\\u12' }}", "{{ '\\ud800' }}", "{{ 'a\\"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(LexJinja(bad).status())) << bad;
  }
  EXPECT_TRUE(absl::IsUnimplemented(LexJinja("{% raw %}{{ x }}{% endraw %}").status()));
}

TEST(JinjaLexerTest, EndMarkersInsideBracketsAreOperators) {
  const auto tokens = LexJinja("{{ {'a': 1}}}");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->back().kind, Kind::kVariableEnd);
  EXPECT_EQ(tokens->size(), 7u);  // {{ { 'a' : 1 } }}
}

}  // namespace
}  // namespace pulse
