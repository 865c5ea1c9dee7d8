#include "core/chat/template_pattern.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

std::vector<JinjaToken> Canonical(std::string_view source) {
  absl::StatusOr<std::vector<JinjaToken>> tokens = CanonicalTemplate(source);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  return tokens.ok() ? *std::move(tokens) : std::vector<JinjaToken>();
}

bool SameStructure(std::string_view a, std::string_view b) {
  return MatchTemplate(Canonical(a), Canonical(b)).has_value();
}

TEST(TemplatePatternTest, SpellingsThatRenderTheSameAreEqual) {
  EXPECT_TRUE(SameStructure("{{ message['content'] }}", "{{message.content}}"));
  EXPECT_TRUE(SameStructure("{{ '<a>' + m['role'] + '\\n' + '<b>' }}",
                            "<a>{{- m.role -}}{{ \"\\n<b>\" }}"));
  EXPECT_TRUE(SameStructure("{% if x %}\n  {{- 'A' }}\n{%- endif %}", "{% if x %}A{% endif %}"));
  EXPECT_TRUE(SameStructure("{{ 'a' + x | trim }}", "a{{ x|trim }}"));
}

TEST(TemplatePatternTest, SpellingsThatMayRenderDifferentlyAreNot) {
  EXPECT_FALSE(SameStructure("{{ x }}", "{{ x | trim }}"));
  EXPECT_FALSE(SameStructure("{{ m['items'] }}", "{{ m.items }}"));  // a dict method
  EXPECT_FALSE(SameStructure("{{ 'a' + x if y else z }}", "a{{ x if y else z }}"));
  EXPECT_FALSE(SameStructure("{{ ('a' + x) | trim }}", "a{{ x | trim }}"));
  EXPECT_FALSE(SameStructure("{{ 'a' - x }}", "a{{ - x }}"));
  EXPECT_FALSE(SameStructure("{% if x in ['a'] %}{% endif %}", "{% if x in .a %}{% endif %}"));
  EXPECT_FALSE(SameStructure("{% if x %}\n{% endif %}", "{% if x +%}\n{% endif %}"));
  // An expression does not trim: "  A\n" is output here, not "A".
  EXPECT_FALSE(SameStructure("{% if x %}\n  {{ 'A' }}\n{% endif %}", "{% if x %}A{% endif %}"));
}

TEST(TemplatePatternTest, CapturesTakeTheCandidatesText) {
  const std::vector<JinjaToken> reference =
      Canonical("{{ '<s>@@system@@</s>' }}{% set d = '@@date@@' %}{{ x }}");
  const auto captures =
      MatchTemplate(reference, Canonical("<s>Be brief.</s>{% set d = \"1 Jan\" %}{{ x }}"));
  ASSERT_TRUE(captures.has_value());
  EXPECT_EQ(Captured(*captures, "system"), "Be brief.");
  EXPECT_EQ(Captured(*captures, "date"), "1 Jan");
  EXPECT_EQ(Captured(*captures, "none"), "");
  EXPECT_TRUE(MatchTemplate(reference, Canonical("<s></s>{% set d = '' %}{{ x }}")).has_value());
  EXPECT_FALSE(MatchTemplate(reference, Canonical("<s>x</t>{% set d = '' %}{{ x }}")));
  EXPECT_FALSE(MatchTemplate(reference, Canonical("<s>x</s>{% set d = '' %}{{ y }}")));
  EXPECT_FALSE(MatchTemplate(reference, Canonical("<s>x</s>{% set d = '' %}")));
}

TEST(TemplatePatternTest, ARepeatedCaptureMustRepeatItsText) {
  const std::vector<JinjaToken> reference = Canonical("{{ '@@a@@' }}{% if x %}{{ '@@a@@' }}");
  EXPECT_TRUE(MatchTemplate(reference, Canonical("q{% if x %}q")).has_value());
  EXPECT_FALSE(MatchTemplate(reference, Canonical("q{% if x %}r")).has_value());
}

}  // namespace
}  // namespace pulse
