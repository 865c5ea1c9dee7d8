#include "core/text/text_stream.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace pulse {
namespace {

// A tokenizer whose pieces are given: enough to test the stream without a vocabulary file.
class FakeTokenizer final : public Tokenizer {
 public:
  FakeTokenizer(std::vector<std::string> pieces, int32_t control, bool space_prefix)
      : pieces_(std::move(pieces)), control_(control), space_prefix_(space_prefix) {}

  std::vector<int32_t> Encode(std::string_view, const EncodeOptions&) const override { return {}; }
  std::string_view TokenPiece(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? std::string_view(pieces_[id]) : std::string_view();
  }
  std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options) const override {
    std::string text;
    for (const int32_t id : ids) {
      if (kind(id) == TokenKind::kControl && !options.render_special) continue;
      std::string_view piece = TokenPiece(id);
      if (text.empty() && space_prefix_ && !piece.empty() && piece.front() == ' ') {
        piece.remove_prefix(1);
      }
      text += piece;
    }
    return text;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  TokenKind kind(int32_t id) const override {
    return id == control_ ? TokenKind::kControl : TokenKind::kNormal;
  }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return control_; }
  std::span<const int32_t> end_of_generation_ids() const override { return {}; }
  bool add_bos() const override { return false; }
  bool add_space_prefix() const override { return space_prefix_; }
  std::string_view model_name() const override { return "fake"; }
  std::string_view pre_tokenizer_name() const override { return ""; }
  std::string_view chat_template() const override { return ""; }

 private:
  std::vector<std::string> pieces_;
  int32_t control_;
  bool space_prefix_;
};

// Pieces: 0 "<end>" (control), 1 " Hello", 2 ",", 3 the first two bytes of U+1F600, 4 its last
// two, 5 "\n", 6 "Us", 7 "er:", 8 a lone 0xFF byte, 9 the first byte of U+00E9.
std::vector<std::string> Pieces() {
  return {"<end>", " Hello", ",", "\xF0\x9F", "\x98\x80", "\n", "Us", "er:", "\xFF", "\xC3"};
}

struct Streamed {
  std::vector<std::string> pieces;
  std::string text;
  bool stopped = false;
};

Streamed Stream(TextStream& stream, const std::vector<int32_t>& ids) {
  Streamed out;
  for (const int32_t id : ids) {
    TextStream::Piece piece = stream.Add(id);
    out.text += piece.text;
    out.pieces.push_back(std::move(piece.text));
    if (piece.stopped) {
      out.stopped = true;
      return out;
    }
  }
  out.text += stream.Finish();
  return out;
}

TEST(TextStreamTest, NeverEmitsHalfACharacterAndEqualsTheWholeDecode) {
  const FakeTokenizer tokenizer(Pieces(), 0, false);
  TextStream stream(tokenizer, {});
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 0};
  const Streamed out = Stream(stream, ids);
  EXPECT_EQ(out.pieces[2], "");  // half of U+1F600 waits
  EXPECT_EQ(out.pieces[3], "\xF0\x9F\x98\x80");
  EXPECT_EQ(out.pieces[5], "");  // the control token renders nothing
  EXPECT_EQ(out.text, tokenizer.Decode(ids, {}));
  EXPECT_FALSE(out.stopped);
}

TEST(TextStreamTest, InvalidBytesPassThroughAndATruncatedCharacterEndsAsItsBytes) {
  const FakeTokenizer tokenizer(Pieces(), 0, false);
  TextStream stream(tokenizer, {});
  const std::vector<int32_t> ids = {8, 1, 9};
  const Streamed out = Stream(stream, ids);
  EXPECT_EQ(out.pieces[0], "\xFF");
  EXPECT_EQ(out.pieces[2], "");
  EXPECT_EQ(out.text, "\xFF Hello\xC3");
  EXPECT_EQ(out.text, tokenizer.Decode(ids, {}));
}

TEST(TextStreamTest, SentencePieceDropsTheLeadingSpaceOfTheFirstText) {
  const FakeTokenizer tokenizer(Pieces(), 0, true);
  TextStream stream(tokenizer, {});
  const std::vector<int32_t> ids = {0, 1, 1};
  const Streamed out = Stream(stream, ids);
  EXPECT_EQ(out.text, "Hello Hello");
  EXPECT_EQ(out.text, tokenizer.Decode(ids, {}));
}

TEST(TextStreamTest, AStopStringAcrossTokensIsCaughtAndNotEmitted) {
  const FakeTokenizer tokenizer(Pieces(), 0, false);
  TextStream stream(tokenizer, {"\nUser:"});
  const Streamed out = Stream(stream, {1, 2, 5, 6, 7, 1});
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, " Hello,");
  EXPECT_EQ(out.pieces.size(), 5u);  // the stop is seen at "er:", the fifth token
  EXPECT_TRUE(stream.stopped());
  EXPECT_EQ(stream.Add(1).text, "");
  EXPECT_EQ(stream.Finish(), "");
}

TEST(TextStreamTest, AStopStringPrefixAtTheEndIsFlushed) {
  const FakeTokenizer tokenizer(Pieces(), 0, false);
  TextStream stream(tokenizer, {"\nUser:"});
  const Streamed out = Stream(stream, {1, 5, 6});
  EXPECT_FALSE(out.stopped);
  EXPECT_EQ(out.pieces[1], "");  // "\n" could start the stop string
  EXPECT_EQ(out.text, " Hello\nUs");
}

TEST(TextStreamTest, RenderSpecialShowsControlTokens) {
  const FakeTokenizer tokenizer(Pieces(), 0, false);
  TextStream stream(tokenizer, {}, {.render_special = true});
  EXPECT_EQ(Stream(stream, {1, 0}).text, " Hello<end>");
}

}  // namespace
}  // namespace pulse
