// The model's tokenizer: text to token ids and back, loaded from the model itself (GGUF
// tokenizer.ggml.* metadata, or a Hugging Face tokenizer.json beside a safetensors model).
//
// Byte-level BPE ("gpt2": GPT-2, Llama 3, SmolLM, Qwen2 families): a regex pre-tokenizer
// splits the text, every byte maps to a symbol, merges apply by rank. Special tokens written in
// the text are matched first. SentencePiece-style BPE ("llama": Llama 1/2, Mistral) is not
// written yet (Unimplemented); the interface has what it needs (add_space_prefix, kByte).
//
// Immutable after loading; every method is const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/format/gguf_reader.h"

namespace pulse {

// The kind of a vocabulary entry, numbered as GGUF's tokenizer.ggml.token_type.
enum class TokenKind : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <|im_end|>, <s>: special, not rendered in decoded text by default
  kUserDefined = 4,  // added tokens that are plain text (rendered)
  kUnused = 5,
  kByte = 6,  // <0x0A>: stands for one raw byte
};

struct EncodeOptions {
  // Prepend BOS (and append EOS) as the tokenizer's configuration asks (add_bos/add_eos).
  bool add_special = true;
  // Control tokens written in the text ("<|im_start|>") become their ids; when false they are
  // encoded as the plain text they are. User-defined (non-special added) tokens always match,
  // as in Hugging Face tokenizers and llama.cpp.
  bool parse_special = true;
};

struct DecodeOptions {
  // Render control tokens as their text ("<|im_end|>"); by default they decode to nothing.
  bool render_special = false;
};

class Tokenizer {
 public:
  // From GGUF metadata. NotFound when the file has no tokenizer.ggml.model; Unimplemented naming
  // the value for an unsupported model or pre-tokenizer ("unsupported pre-tokenizer 'xyz'");
  // InvalidArgument (the file is inconsistent: counts differ, an id out of range, a malformed
  // merge) otherwise.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  // From a Hugging Face model directory: tokenizer.json (BPE model; ByteLevel, optionally after
  // Split/Digits, or SentencePiece style: Prepend/Replace normalizer or Metaspace, byte
  // fallback; added tokens) and, when present, tokenizer_config.json (bos/eos/unk tokens,
  // add_bos_token/add_eos_token, chat_template), chat_template.jinja and generation_config.json
  // (eos_token_id: end-of-generation ids). NotFound without tokenizer.json; Unimplemented naming
  // the unsupported part; InvalidArgument for an inconsistent file.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromHfDirectory(const std::string& directory);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  virtual ~Tokenizer() = default;

  // Any bytes are accepted. Each byte that starts no well-formed UTF-8 sequence stands alone:
  // the well-formed stretches around it are tokenized as if each were a text of its own
  // (byte-level) or merged apart from it (SentencePiece), and the byte becomes its byte-level
  // symbol's token or its <0xAB> token. So Decode(Encode(text)) == text, except that a byte a
  // byte-level vocabulary has no symbol for (SmolLM2 has none for 21 byte values, among them
  // 0x04, 0xC0, 0xF1 and 0xFF) is dropped, as Hugging Face tokenizers drops it, and the
  // SentencePiece leading-space rule of Decode.
  virtual std::vector<int32_t> Encode(std::string_view text,
                                      const EncodeOptions& options) const = 0;

  // The bytes a token contributes to decoded text: the byte-level mapping undone, U+2581 as a
  // space, <0xAB> as its byte, a control token as its text. Empty for an id out of range.
  // Decoding is the concatenation of these pieces except that, for tokenizers that add a space
  // prefix when encoding (SentencePiece), the first piece of a text loses one leading space.
  virtual std::string_view TokenPiece(int32_t id) const = 0;
  virtual std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual TokenKind kind(int32_t id) const = 0;  // kUnused for an id out of range
  // -1 when the tokenizer has none.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  // Ids that end a generation besides eos_id (for example <|eot_id|>, <|im_end|>), no duplicates.
  virtual std::span<const int32_t> end_of_generation_ids() const = 0;
  virtual bool add_bos() const = 0;
  // SentencePiece's "▁" prefix: Encode adds it, decoding the start of a text removes it.
  virtual bool add_space_prefix() const = 0;
  virtual std::string_view model_name() const = 0;          // "gpt2", "llama"
  virtual std::string_view pre_tokenizer_name() const = 0;  // "smollm", "llama-bpe", ... or ""
  // The Jinja source of the model's chat template; empty when the model has none.
  virtual std::string_view chat_template() const = 0;

 protected:
  Tokenizer() = default;
};

}  // namespace pulse
