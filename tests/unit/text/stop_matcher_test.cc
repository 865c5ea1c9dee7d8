#include "core/text/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

// Feeds `pieces` and returns what was emitted (with the flush when no stop string was found).
std::string Stream(StopMatcher& matcher, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& piece : pieces) {
    const StopMatcher::Result result = matcher.Add(piece);
    out += result.text;
    if (result.stopped) return out;
  }
  return out + matcher.Flush();
}

TEST(StopMatcherTest, CatchesAStopStringSplitAcrossPieces) {
  StopMatcher matcher({"\nUser:"});
  EXPECT_EQ(Stream(matcher, {"Hello", " there", "\n", "Us", "er", ": more"}), "Hello there");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopMatcherTest, HoldsBackOnlyWhatCouldStillMatch) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.Add("abST").text, "ab");
  EXPECT_EQ(matcher.Add("x").text, "STx");  // "STx" can no longer become "STOP"
  EXPECT_EQ(matcher.Add("S").text, "");
  EXPECT_EQ(matcher.Flush(), "S");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopMatcherTest, TheEarliestOfSeveralStopStringsWins) {
  StopMatcher matcher({"cd", "bcdef", "zz"});
  const StopMatcher::Result result = matcher.Add("abcdefg");
  EXPECT_TRUE(result.stopped);
  EXPECT_EQ(result.text, "a");
  EXPECT_EQ(matcher.Add("more").text, "");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, AStopStringInsideOnePiece) {
  StopMatcher matcher({"###"});
  EXPECT_EQ(Stream(matcher, {"one ### two"}), "one ");
}

TEST(StopMatcherTest, RepeatedPrefixCharacters) {
  StopMatcher matcher({"aab"});
  EXPECT_EQ(Stream(matcher, {"a", "a", "a", "b", "c"}), "a");
}

TEST(StopMatcherTest, WithoutStopStringsEverythingPassesAtOnce) {
  StopMatcher matcher({"", ""});
  EXPECT_EQ(matcher.Add("text").text, "text");
  EXPECT_EQ(matcher.Flush(), "");
}

}  // namespace
}  // namespace pulse
