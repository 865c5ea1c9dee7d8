// Tokenizers from Hugging Face directories written by the test: a tiny byte-level BPE, and
// every kind of broken or unsupported tokenizer.json.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/tokenizer/test_vocabularies.h"

namespace pulse::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// tokenizer.json for TinyByteLevel: <|end|> a special added token, <user> a plain one.
Json TinyTokenizerJson() {
  const TinyByteLevel v;
  Json vocab = Json::object();
  for (size_t id = 0; id + 2 < v.tokens.size(); ++id) vocab[v.tokens[id]] = id;
  return {
      {"added_tokens",
       {{{"id", v.id("<|end|>")}, {"content", "<|end|>"}, {"special", true}},
        {{"id", v.id("<user>")}, {"content", "<user>"}, {"special", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"h e", {"l", "l"}, "he ll", "hell o", "Ġ w"}}}},
  };
}

std::string WriteDirectory(const Json& tokenizer, const Json* config = nullptr) {
  const std::string directory = TempPath("hf");
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  std::ofstream(directory + "/tokenizer.json") << tokenizer.dump();
  if (config != nullptr) std::ofstream(directory + "/tokenizer_config.json") << config->dump();
  return directory;
}

void ExpectError(const Json& tokenizer, absl::StatusCode code, std::string_view text) {
  const auto loaded = Tokenizer::FromHfDirectory(WriteDirectory(tokenizer));
  EXPECT_EQ(loaded.status().code(), code) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr(std::string(text))) << loaded.status();
}

TEST(HfTokenizer, TinyByteLevelWithConfig) {
  const TinyByteLevel v;
  const Json config = {{"bos_token", {{"content", "<user>"}}},
                       {"eos_token", "<|end|>"},
                       {"add_bos_token", true},
                       {"chat_template", {{{"name", "default"}, {"template", "T"}}}}};
  const auto tokenizer = Tokenizer::FromHfDirectory(WriteDirectory(TinyTokenizerJson(), &config));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& t = **tokenizer;
  EXPECT_EQ(t.model_name(), "gpt2");
  EXPECT_EQ(t.pre_tokenizer_name(), "gpt2");
  EXPECT_EQ(t.bos_id(), v.id("<user>"));
  EXPECT_EQ(t.eos_id(), v.id("<|end|>"));
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.chat_template(), "T");
  EXPECT_EQ(t.kind(v.id("<|end|>")), TokenKind::kControl);
  EXPECT_EQ(t.kind(v.id("<user>")), TokenKind::kUserDefined);
  EXPECT_THAT(t.Encode("hello world<|end|>", {}),
              ElementsAre(v.id("<user>"), v.id("hello"), v.id("Ġw"), v.byte('o'), v.byte('r'),
                          v.byte('l'), v.byte('d'), v.id("<|end|>")));
}

TEST(HfTokenizer, NoTokenizerJsonIsNotFound) {
  const std::string directory = TempPath("empty");
  std::filesystem::create_directories(directory);
  EXPECT_EQ(Tokenizer::FromHfDirectory(directory).status().code(), absl::StatusCode::kNotFound);
}

// A side file that is a FIFO (which would block) or a device (which would never end) is refused.
TEST(HfTokenizer, ATokenizerFileThatIsNoRegularFileIsRefused) {
  const std::string directory = TempPath("special");
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  std::filesystem::create_symlink("/dev/zero", directory + "/tokenizer.json");
  EXPECT_EQ(Tokenizer::FromHfDirectory(directory).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::remove(directory + "/tokenizer.json");
  ASSERT_EQ(::mkfifo((directory + "/tokenizer.json").c_str(), 0600), 0);
  const auto loaded = Tokenizer::FromHfDirectory(directory);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr("is not a regular file"));
}

TEST(HfTokenizer, NotJson) {
  const std::string directory = TempPath("bad");
  std::filesystem::create_directories(directory);
  std::ofstream(directory + "/tokenizer.json") << "{\"model\": [";
  const auto loaded = Tokenizer::FromHfDirectory(directory);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr("tokenizer.json: bad JSON"));
}

// A pre-tokenizer (or normalizer) nested far deeper than any real one is refused before it is
// parsed, not walked until the stack runs out.
TEST(HfTokenizer, NestingTooDeepIsRefused) {
  std::string nested;
  for (int i = 0; i < 100'000; ++i) nested += R"({"type": "Sequence", "pretokenizers": [)";
  nested += R"({"type": "ByteLevel", "add_prefix_space": false})";
  for (int i = 0; i < 100'000; ++i) nested += "]}";
  const std::string directory = TempPath("deep");
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  std::string text = TinyTokenizerJson().dump();
  text.replace(text.find(R"("pre_tokenizer":)"), 0, R"("deep": )" + nested + ", ");
  std::ofstream(directory + "/tokenizer.json") << text;
  const auto loaded = Tokenizer::FromHfDirectory(directory);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr("JSON nested more than"));
}

// One huge id in a 1 KB file would size tables of that many entries: it is refused first.
TEST(HfTokenizer, AnIdPastTheEntriesIsRefusedBeforeItSizesATable) {
  Json huge = TinyTokenizerJson();
  huge["added_tokens"][1]["id"] = 2'000'000'000;
  ExpectError(huge, absl::StatusCode::kInvalidArgument, "has the id 2000000000, outside the");
  Json vocab_id = TinyTokenizerJson();
  vocab_id["model"]["vocab"]["h"] = 1'500'000'000;
  ExpectError(vocab_id, absl::StatusCode::kInvalidArgument, "has the id 1500000000, outside the");
}

TEST(HfTokenizer, UnsupportedShapes) {
  Json unigram = TinyTokenizerJson();
  unigram["model"]["type"] = "Unigram";
  ExpectError(unigram, absl::StatusCode::kUnimplemented, "unsupported tokenizer model 'Unigram'");
  Json whitespace = TinyTokenizerJson();
  whitespace["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectError(whitespace, absl::StatusCode::kUnimplemented,
              "unsupported pre-tokenizer 'Whitespace'");
  Json nfkc = TinyTokenizerJson();
  nfkc["normalizer"] = {{"type", "NFKC"}};
  ExpectError(nfkc, absl::StatusCode::kUnimplemented, "unsupported normalizer 'NFKC'");
  Json prefix = TinyTokenizerJson();
  prefix["pre_tokenizer"]["add_prefix_space"] = true;
  ExpectError(prefix, absl::StatusCode::kUnimplemented, "ByteLevel with add_prefix_space");
  Json merged = TinyTokenizerJson();
  merged["pre_tokenizer"] = {{"type", "Split"},
                             {"pattern", {{"Regex", "\\s+"}}},
                             {"behavior", "MergedWithPrevious"},
                             {"invert", false}};
  ExpectError(merged, absl::StatusCode::kUnimplemented, "MergedWithPrevious");
  Json dropout = TinyTokenizerJson();
  dropout["model"]["dropout"] = 0.1;
  ExpectError(dropout, absl::StatusCode::kUnimplemented, "dropout");
  Json neither = TinyTokenizerJson();
  neither["pre_tokenizer"] = nullptr;
  ExpectError(neither, absl::StatusCode::kUnimplemented, "unsupported tokenizer shape");
}

TEST(HfTokenizer, BrokenVocabularies) {
  Json malformed = TinyTokenizerJson();
  malformed["model"]["merges"].push_back("a b c");
  ExpectError(malformed, absl::StatusCode::kInvalidArgument,
              "merge 5 'a b c' is not two tokens separated by a space");
  Json pair = TinyTokenizerJson();
  pair["model"]["merges"].push_back(Json::array({"a"}));
  ExpectError(pair, absl::StatusCode::kInvalidArgument, "merge 5 is neither");
  Json unknown = TinyTokenizerJson();
  unknown["model"]["merges"].push_back("x y");
  ExpectError(unknown, absl::StatusCode::kInvalidArgument, "'xy' is not in the vocabulary");
  Json far = TinyTokenizerJson();
  far["added_tokens"][1]["id"] = 300;
  ExpectError(far, absl::StatusCode::kInvalidArgument,
              "token '<user>' has the id 300, outside the 263 entries");
  // An added token that repeats a vocabulary entry leaves room for a hole below the entries.
  Json hole = TinyTokenizerJson();
  hole["added_tokens"].push_back({{"id", 0}, {"content", TinyByteLevel().tokens[0]}});
  hole["added_tokens"][1]["id"] = 263;
  ExpectError(hole, absl::StatusCode::kInvalidArgument, "token id 262 is in neither");
  Json clash = TinyTokenizerJson();
  clash["added_tokens"][1]["id"] = 5;
  ExpectError(clash, absl::StatusCode::kInvalidArgument, "id 5 is both");
  Json negative = TinyTokenizerJson();
  negative["model"]["vocab"]["he"] = -3;
  ExpectError(negative, absl::StatusCode::kInvalidArgument, "has the id -3, outside the");
  Json no_vocab = TinyTokenizerJson();
  no_vocab["model"].erase("vocab");
  ExpectError(no_vocab, absl::StatusCode::kInvalidArgument, "no \"vocab\" object");
  Json bad_regex = TinyTokenizerJson();
  bad_regex["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(x"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  ExpectError(bad_regex, absl::StatusCode::kInvalidArgument, "does not compile");
}

TEST(HfTokenizer, BrokenConfig) {
  const Json config = {{"bos_token", "<nope>"}};
  const auto loaded = Tokenizer::FromHfDirectory(WriteDirectory(TinyTokenizerJson(), &config));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr("bos_token '<nope>' is not in the vocabulary"));
  const Json wrong_type = {{"add_bos_token", "yes"}};
  const auto typed = Tokenizer::FromHfDirectory(WriteDirectory(TinyTokenizerJson(), &wrong_type));
  EXPECT_THAT(typed.status().message(), HasSubstr("\"add_bos_token\" is not true or false"));
}

}  // namespace
}  // namespace pulse::testing
