#include "core/chat/python_strip.h"

#include "gtest/gtest.h"

namespace pulse {
namespace {

TEST(PythonStripTest, StripsWhatPythonsIsspaceAccepts) {
  EXPECT_EQ(PythonStrip(" \t\n\v\f\r\x1c\x1f hi there \xc2\xa0\xe3\x80\x80\xe2\x80\xa8\xc2\x85"),
            "hi there");
  EXPECT_EQ(PythonStrip("   "), "");
  EXPECT_EQ(PythonStrip(""), "");
  EXPECT_EQ(PythonLstrip("  a  "), "a  ");
  EXPECT_EQ(PythonRstrip("  a  "), "  a");
}

TEST(PythonStripTest, KeepsWhatPythonDoesNotCallWhitespace) {
  // U+200B ZERO WIDTH SPACE and U+FEFF are not whitespace for Python; invalid bytes are kept.
  EXPECT_EQ(PythonStrip("\xe2\x80\x8b"
                        "a\xef\xbb\xbf"),
            "\xe2\x80\x8b"
            "a\xef\xbb\xbf");
  EXPECT_EQ(PythonStrip("\x80 a \xa0"), "\x80 a \xa0");
  EXPECT_EQ(PythonStrip("\xe3\x80"), "\xe3\x80");  // a truncated U+3000
}

TEST(PythonStripTest, AllSpace) {
  EXPECT_TRUE(IsAllPythonSpace(" \t\xe3\x80\x80"));
  EXPECT_FALSE(IsAllPythonSpace(""));
  EXPECT_FALSE(IsAllPythonSpace(" x "));
}

}  // namespace
}  // namespace pulse
