// Tokenizers from GGUF metadata: tiny vocabularies whose results can be worked out by hand,
// and every kind of broken metadata.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/tokenizer/test_vocabularies.h"

namespace pulse::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr std::string_view kSpace = "\xE2\x96\x81";

std::string AllBytes() {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  return bytes;
}

class ByteLevelGgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GgufWriter writer;
    vocabulary_.Write(writer);
    auto tokenizer = LoadGguf(writer);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
  }
  TinyByteLevel vocabulary_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(ByteLevelGgufTest, MergesByRankWithinPieces) {
  const TinyByteLevel& v = vocabulary_;
  EXPECT_THAT(
      EncodePlain(*tokenizer_, "hello world"),
      ElementsAre(v.id("hello"), v.id("Ġw"), v.byte('o'), v.byte('r'), v.byte('l'), v.byte('d')));
  // "hell" + "o" needs "hell" first: "hellhello" is two pieces' worth of merges in one piece.
  EXPECT_THAT(EncodePlain(*tokenizer_, "hellhello"), ElementsAre(v.id("hell"), v.id("hello")));
  EXPECT_EQ(tokenizer_->Decode(EncodePlain(*tokenizer_, "hello world"), {}), "hello world");
}

TEST_F(ByteLevelGgufTest, Properties) {
  EXPECT_EQ(tokenizer_->model_name(), "gpt2");
  EXPECT_EQ(tokenizer_->pre_tokenizer_name(), "gpt2");
  EXPECT_EQ(tokenizer_->vocab_size(), 263);
  EXPECT_EQ(tokenizer_->eos_id(), vocabulary_.id("<|end|>"));
  EXPECT_EQ(tokenizer_->bos_id(), -1);
  EXPECT_FALSE(tokenizer_->add_bos());
  EXPECT_FALSE(tokenizer_->add_space_prefix());
  EXPECT_THAT(tokenizer_->end_of_generation_ids(), IsEmpty());  // <|end|> is eos itself
  EXPECT_EQ(tokenizer_->kind(vocabulary_.id("<|end|>")), TokenKind::kControl);
  EXPECT_EQ(tokenizer_->kind(-1), TokenKind::kUnused);
  EXPECT_EQ(tokenizer_->kind(263), TokenKind::kUnused);
  EXPECT_EQ(tokenizer_->TokenPiece(263), "");
  EXPECT_EQ(tokenizer_->TokenPiece(vocabulary_.id("Ġw")), " w");
  EXPECT_EQ(tokenizer_->TokenPiece(vocabulary_.id("<|end|>")), "<|end|>");
}

TEST_F(ByteLevelGgufTest, ControlTokensParsedOnlyWhenAsked) {
  const int32_t end = vocabulary_.id("<|end|>");
  const std::string text = "hello<|end|>";
  EXPECT_THAT(EncodePlain(*tokenizer_, text), ElementsAre(vocabulary_.id("hello"), end));
  const std::vector<int32_t> plain =
      tokenizer_->Encode(text, {.add_special = false, .parse_special = false});
  EXPECT_THAT(plain, ::testing::Not(::testing::Contains(end)));
  EXPECT_EQ(tokenizer_->Decode(plain, {}), text);
  // Control tokens decode to nothing unless rendered.
  EXPECT_EQ(tokenizer_->Decode(EncodePlain(*tokenizer_, text), {}), "hello");
  EXPECT_EQ(tokenizer_->Decode(EncodePlain(*tokenizer_, text), {.render_special = true}), text);
}

TEST_F(ByteLevelGgufTest, UserDefinedTokensAlwaysMatchAndRender) {
  const int32_t user = vocabulary_.id("<user>");
  const std::vector<int32_t> ids =
      tokenizer_->Encode("a<user>", {.add_special = false, .parse_special = false});
  EXPECT_THAT(ids, ElementsAre(vocabulary_.byte('a'), user));
  EXPECT_EQ(tokenizer_->Decode(ids, {}), "a<user>");
}

TEST_F(ByteLevelGgufTest, EveryByteRoundTrips) {
  const std::string bytes = AllBytes() + "\xC3\xA9\xE2\x82\xFF\x80 hello";
  const std::vector<int32_t> ids = EncodePlain(*tokenizer_, bytes);
  EXPECT_EQ(tokenizer_->Decode(ids, {}), bytes);
  // An invalid byte is a piece of its own: it does not merge into the valid text around it.
  EXPECT_THAT(EncodePlain(*tokenizer_, "he\x80llo"),
              ElementsAre(vocabulary_.id("he"), 0x80, vocabulary_.id("ll"), vocabulary_.byte('o')));
}

TEST_F(ByteLevelGgufTest, OutOfRangeIdsDecodeToNothing) {
  const std::vector<int32_t> ids = {-5, vocabulary_.id("hello"), 1 << 30};
  EXPECT_EQ(tokenizer_->Decode(ids, {}), "hello");
}

TEST(ByteLevelGguf, BosAndEosAddedWhenConfigured) {
  TinyByteLevel v;
  GgufWriter writer;
  v.Write(writer);
  writer.AddU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.id("<user>")));
  writer.AddBool("tokenizer.ggml.add_bos_token", true);
  writer.AddBool("tokenizer.ggml.add_eos_token", true);
  const auto tokenizer = LoadGguf(writer);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT((*tokenizer)->Encode("he", {}),
              ElementsAre(v.id("<user>"), v.id("he"), v.id("<|end|>")));
  EXPECT_THAT(EncodePlain(**tokenizer, "he"), ElementsAre(v.id("he")));
}

TEST(ByteLevelGguf, Llama3PiecesThatAreTokensIgnoreMerges) {
  // "hello" without the "hell o" merge is still one token under llama-bpe (ignore_merges).
  TinyByteLevel v;
  v.merges = {"h e", "l l", "he ll", "Ġ w"};
  GgufWriter writer;
  v.Write(writer, "llama-bpe");
  const auto tokenizer = LoadGguf(writer);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(EncodePlain(**tokenizer, "hello"), ElementsAre(v.id("hello")));
  GgufWriter gpt2_writer;
  v.Write(gpt2_writer, "gpt2");
  const auto gpt2 = LoadGguf(gpt2_writer);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_THAT(EncodePlain(**gpt2, "hello"), ElementsAre(v.id("hell"), v.byte('o')));
}

class SentencePieceGgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GgufWriter writer;
    vocabulary_.Write(writer);
    auto tokenizer = LoadGguf(writer);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
  }
  int32_t id(const std::string& token) const { return vocabulary_.id(token); }
  int32_t byte(int b) const { return 3 + b; }
  TinySentencePiece vocabulary_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(SentencePieceGgufTest, MergesByScoreLeftmostFirstOnTies) {
  const std::string sp(kSpace);
  // "▁wo": "▁w" and "wo" score the same; the left pair wins.
  EXPECT_THAT(EncodePlain(*tokenizer_, "hello world"),
              ElementsAre(id(sp + "hello"), id(sp + "w"), id("o"), id("r"), id("l"), id("d")));
  EXPECT_THAT(tokenizer_->Encode("hello", {}), ElementsAre(1, id(sp + "hello")));
}

TEST_F(SentencePieceGgufTest, Properties) {
  EXPECT_EQ(tokenizer_->model_name(), "llama");
  EXPECT_EQ(tokenizer_->pre_tokenizer_name(), "");
  EXPECT_TRUE(tokenizer_->add_bos());
  EXPECT_TRUE(tokenizer_->add_space_prefix());
  EXPECT_THAT(tokenizer_->end_of_generation_ids(), IsEmpty());  // </s> is eos itself
  EXPECT_EQ(tokenizer_->kind(byte(0x0A)), TokenKind::kByte);
  EXPECT_EQ(tokenizer_->TokenPiece(byte(0x0A)), "\n");
  EXPECT_EQ(tokenizer_->TokenPiece(id(std::string(kSpace) + "hello")), " hello");
}

TEST_F(SentencePieceGgufTest, ByteFallbackForUnknownCharactersAndInvalidBytes) {
  EXPECT_THAT(EncodePlain(*tokenizer_, "\xF0\x9F\x98\x80"),  // 😀
              ElementsAre(id(std::string(kSpace)), byte(0xF0), byte(0x9F), byte(0x98), byte(0x80)));
  for (const std::string text : {"\xF0\x9F\x98\x80", "hello\xFF\x80 wor\nld", "", " x"}) {
    EXPECT_EQ(tokenizer_->Decode(EncodePlain(*tokenizer_, text), {}), text);
    EXPECT_EQ(tokenizer_->Decode(tokenizer_->Encode(text, {}), {}), text);
  }
}

TEST_F(SentencePieceGgufTest, EachStretchBetweenSpecialTokensGetsTheSpacePrefix) {
  const std::string sp(kSpace);
  EXPECT_THAT(EncodePlain(*tokenizer_, "hello<s>hello"),
              ElementsAre(id(sp + "hello"), 1, id(sp + "hello")));
  // Only the start of the decoded text loses its space.
  EXPECT_EQ(tokenizer_->Decode(EncodePlain(*tokenizer_, "hello<s>hello"), {}), "hello hello");
}

// --- broken metadata ---------------------------------------------------------------------

absl::Status LoadStatus(const GgufWriter& writer) { return LoadGguf(writer).status(); }

void ExpectError(const absl::Status& status, absl::StatusCode code, std::string_view text) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(status.message(), HasSubstr(std::string(text))) << status;
}

TEST(GgufTokenizerErrors, NoTokenizerIsNotFound) {
  GgufWriter writer;
  writer.AddString("general.architecture", "llama");
  ExpectError(LoadStatus(writer), absl::StatusCode::kNotFound, "tokenizer.ggml.model");
}

TEST(GgufTokenizerErrors, UnsupportedModelAndPreTokenizer) {
  GgufWriter bert;
  bert.AddString("tokenizer.ggml.model", "bert");
  ExpectError(LoadStatus(bert), absl::StatusCode::kUnimplemented,
              "unsupported tokenizer model 'bert'");
  GgufWriter falcon;
  TinyByteLevel().Write(falcon, "falcon");
  ExpectError(LoadStatus(falcon), absl::StatusCode::kUnimplemented,
              "unsupported pre-tokenizer 'falcon'");
}

TEST(GgufTokenizerErrors, MissingRequiredKeys) {
  GgufWriter no_tokens;
  no_tokens.AddString("tokenizer.ggml.model", "gpt2");
  ExpectError(LoadStatus(no_tokens), absl::StatusCode::kInvalidArgument,
              "tokenizer.ggml.tokens is missing");
  TinyByteLevel v;
  GgufWriter no_merges;
  no_merges.AddString("tokenizer.ggml.model", "gpt2");
  no_merges.AddStringArray("tokenizer.ggml.tokens", v.tokens);
  ExpectError(LoadStatus(no_merges), absl::StatusCode::kInvalidArgument,
              "tokenizer.ggml.merges is missing");
  TinySentencePiece sp;
  GgufWriter no_scores;
  no_scores.AddString("tokenizer.ggml.model", "llama");
  no_scores.AddStringArray("tokenizer.ggml.tokens", sp.tokens);
  ExpectError(LoadStatus(no_scores), absl::StatusCode::kInvalidArgument,
              "tokenizer.ggml.scores is missing");
}

TEST(GgufTokenizerErrors, MismatchedCounts) {
  TinyByteLevel v;
  v.types.pop_back();
  GgufWriter types;
  v.Write(types);
  ExpectError(LoadStatus(types), absl::StatusCode::kInvalidArgument,
              "token_type has 262 entries for 263 tokens");
  TinySentencePiece sp;
  sp.scores.resize(10);
  GgufWriter scores;
  sp.Write(scores);
  ExpectError(LoadStatus(scores), absl::StatusCode::kInvalidArgument, "10 token scores for");
}

TEST(GgufTokenizerErrors, MalformedMerges) {
  for (const std::string merge : {"hello", "h ", " h"}) {
    TinyByteLevel v;
    v.merges.push_back(merge);
    GgufWriter writer;
    v.Write(writer);
    ExpectError(LoadStatus(writer), absl::StatusCode::kInvalidArgument,
                "is not two tokens separated by a space");
  }
  TinyByteLevel unknown;
  unknown.merges.push_back("x y");  // "xy" is not a token
  GgufWriter writer;
  unknown.Write(writer);
  ExpectError(LoadStatus(writer), absl::StatusCode::kInvalidArgument,
              "merge 5 'x y': 'xy' is not in the vocabulary");
}

TEST(GgufTokenizerErrors, OutOfRangeIdsAndTypes) {
  TinyByteLevel v;
  GgufWriter bos;
  v.Write(bos);
  bos.AddU32("tokenizer.ggml.bos_token_id", 263);
  ExpectError(LoadStatus(bos), absl::StatusCode::kInvalidArgument,
              "bos token id 263 is outside the vocabulary of 263 tokens");
  GgufWriter negative;
  v.Write(negative);
  negative.AddI32("tokenizer.ggml.unknown_token_id", -7);
  ExpectError(LoadStatus(negative), absl::StatusCode::kInvalidArgument, "-7 is not a token id");
  GgufWriter pad;
  v.Write(pad);
  pad.AddU32("tokenizer.ggml.padding_token_id", 9999);
  ExpectError(LoadStatus(pad), absl::StatusCode::kInvalidArgument, "padding token id 9999");
  TinyByteLevel bad_type;
  bad_type.types[3] = 9;
  GgufWriter type;
  bad_type.Write(type);
  ExpectError(LoadStatus(type), absl::StatusCode::kInvalidArgument,
              "token_type[3] is 9, not a token type");
}

TEST(GgufTokenizerErrors, WrongValueTypes) {
  GgufWriter writer;
  writer.AddString("tokenizer.ggml.model", "gpt2");
  writer.AddU32("tokenizer.ggml.tokens", 5);
  ExpectError(LoadStatus(writer), absl::StatusCode::kInvalidArgument, "tokenizer.ggml.tokens");
  GgufWriter model_type;
  model_type.AddU32("tokenizer.ggml.model", 2);
  ExpectError(LoadStatus(model_type), absl::StatusCode::kInvalidArgument, "tokenizer.ggml.model");
}

TEST(GgufTokenizerErrors, EmptyVocabulary) {
  GgufWriter writer;
  writer.AddString("tokenizer.ggml.model", "llama");
  writer.AddStringArray("tokenizer.ggml.tokens", {});
  writer.AddF32Array("tokenizer.ggml.scores", {});
  ExpectError(LoadStatus(writer), absl::StatusCode::kInvalidArgument, "the vocabulary is empty");
}

}  // namespace
}  // namespace pulse::testing
