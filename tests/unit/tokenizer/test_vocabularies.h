// Tiny tokenizer vocabularies for the unit tests, written as GGUF metadata.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/format/gguf_reader.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/unit/format/gguf_writer.h"

namespace pulse::testing {

// Byte-level BPE: the 256 byte symbols (ids 0..255), then "he", "ll", "hell", "hello", "Ġw",
// then the control token <|end|> and the user-defined token <user>.
struct TinyByteLevel {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges = {"h e", "l l", "he ll", "hell o", "Ġ w"};

  TinyByteLevel() {
    for (int b = 0; b < 256; ++b) tokens.emplace_back(ByteLevelSymbol(static_cast<uint8_t>(b)));
    for (const char* merged : {"he", "ll", "hell", "hello", "Ġw"}) tokens.emplace_back(merged);
    types.assign(tokens.size(), 1);
    tokens.emplace_back("<|end|>");
    types.push_back(3);
    tokens.emplace_back("<user>");
    types.push_back(4);
  }
  int32_t id(const std::string& token) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == token) return static_cast<int32_t>(i);
    }
    ADD_FAILURE() << "no token " << token;
    return -1;
  }
  int32_t byte(char c) const { return static_cast<uint8_t>(c); }

  // All keys; tests corrupt them before writing.
  void Write(GgufWriter& writer, const std::string& pre = "gpt2") const {
    writer.AddString("tokenizer.ggml.model", "gpt2");
    writer.AddString("tokenizer.ggml.pre", pre);
    writer.AddStringArray("tokenizer.ggml.tokens", tokens);
    writer.AddI32Array("tokenizer.ggml.token_type", types);
    writer.AddStringArray("tokenizer.ggml.merges", merges);
    writer.AddU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(id("<|end|>")));
  }
};

// SentencePiece: <unk> <s> </s>, the 256 <0xAB> byte tokens, then pieces with scores.
struct TinySentencePiece {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};

  TinySentencePiece() {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      Add(name, 0, 6);
    }
    // Characters first (never merge results), then merges by falling score.
    for (const char* c : {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d"}) Add(c, -100, 1);
    Add("ll", -1, 1);
    Add("\xE2\x96\x81h", -2, 1);
    Add("\xE2\x96\x81he", -3, 1);
    Add("\xE2\x96\x81hell", -4, 1);
    Add("\xE2\x96\x81hello", -5, 1);
    Add("\xE2\x96\x81w", -6, 1);
    Add("wo", -6, 1);  // same score as "▁w": in "▁wo" the leftmost pair merges first
  }
  void Add(const std::string& token, float score, int32_t type) {
    tokens.push_back(token);
    scores.push_back(score);
    types.push_back(type);
  }
  int32_t id(const std::string& token) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == token) return static_cast<int32_t>(i);
    }
    ADD_FAILURE() << "no token " << token;
    return -1;
  }
  void Write(GgufWriter& writer) const {
    writer.AddString("tokenizer.ggml.model", "llama");
    writer.AddStringArray("tokenizer.ggml.tokens", tokens);
    writer.AddI32Array("tokenizer.ggml.token_type", types);
    writer.AddF32Array("tokenizer.ggml.scores", scores);
    writer.AddU32("tokenizer.ggml.bos_token_id", 1);
    writer.AddU32("tokenizer.ggml.eos_token_id", 2);
    writer.AddU32("tokenizer.ggml.unknown_token_id", 0);
  }
};

// Writes `writer` to a temporary file and loads its tokenizer.
inline absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGguf(const GgufWriter& writer) {
  const std::vector<std::byte> bytes = writer.Bytes();
  PULSE_ASSIGN_OR_RETURN(const GgufFile gguf,
                         GgufFile::Open(WriteTempFile("tokenizer.gguf", bytes)));
  return Tokenizer::FromGguf(gguf);
}

inline std::vector<int32_t> EncodePlain(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.Encode(text, {.add_special = false, .parse_special = true});
}

}  // namespace pulse::testing
