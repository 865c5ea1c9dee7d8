// ParseJsonText: untrusted JSON, nesting bounded before parsing.
#include "core/format/json_text.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

using ::testing::HasSubstr;

std::string Nested(int depth, const std::string& inner = "1") {
  return std::string(static_cast<size_t>(depth), '[') + inner +
         std::string(static_cast<size_t>(depth), ']');
}

TEST(JsonTextTest, ParsesUpToTheDepthBound) {
  absl::StatusOr<nlohmann::json> value = ParseJsonText(Nested(kMaxJsonDepth), "deep.json");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->is_array());
}

TEST(JsonTextTest, RefusesDeeperNestingWhateverTheSize) {
  for (const int depth : {kMaxJsonDepth + 1, 1'000'000}) {
    const absl::Status status = ParseJsonText(Nested(depth), "deep.json").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("deep.json: JSON nested more than 64"));
  }
  // Objects count as arrays do; an unterminated document is refused too.
  std::string objects;
  for (int i = 0; i <= kMaxJsonDepth; ++i) objects += R"({"a":)";
  EXPECT_EQ(ParseJsonText(objects, "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JsonTextTest, BracketsInsideStringsDoNotNest) {
  const std::string brackets(1000, '[');
  absl::StatusOr<nlohmann::json> value =
      ParseJsonText(R"({"text": ")" + brackets + R"(\"[[", "n": [[1]]})", "strings.json");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ((*value)["text"].get<std::string>(), brackets + "\"[[");
}

TEST(JsonTextTest, TextThatIsNotJsonIsAnInvalidArgumentNamingTheFile) {
  const absl::Status status = ParseJsonText("{\"a\": ", "broken.json").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("broken.json: bad JSON"));
}

}  // namespace
}  // namespace pulse
