// Byte-level BPE (GGUF tokenizer.ggml.model "gpt2"): special tokens matched first, then the
// pre-tokenizer's pieces, each mapped to the byte alphabet and merged by rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/tokenizer.h"

namespace pulse {

struct BpeVocabulary {
  std::vector<std::string> tokens;  // as stored: byte-level text ("Ġthe")
  std::vector<TokenKind> kinds;
  std::vector<std::string> merges;  // "Ġ t", by rank
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::string pre_tokenizer;
  std::string chat_template;
};

// InvalidArgument for inconsistent vocabularies (a malformed merge, an id out of range).
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateBpeTokenizer(BpeVocabulary vocabulary);

}  // namespace pulse
