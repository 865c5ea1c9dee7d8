// Everything a tokenizer is built from, as read from a GGUF file or a Hugging Face directory,
// before any lookup table is made.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/format/gguf_reader.h"
#include "core/tokenizer/tokenizer.h"

namespace pulse {

enum class VocabularyModel {
  kByteLevelBpe,   // "gpt2": merges by rank over byte-level symbols
  kSentencePiece,  // "llama": merges over characters, byte fallback, spaces as U+2581
};

// Where a SentencePiece tokenizer puts its "▁" prefix.
enum class SpacePrefix {
  kNone,
  kEverySegment,     // each stretch of text between special tokens (GGUF, HF Prepend)
  kMetaspaceAlways,  // HF Metaspace "always": each stretch that does not start with a space
  kMetaspaceFirst,   // HF Metaspace "first": only a stretch at the start of the text, likewise
};

struct Vocabulary {
  VocabularyModel model = VocabularyModel::kByteLevelBpe;
  std::string pre_tokenizer_name;                  // "smollm", ... ; "" for SentencePiece
  std::vector<std::string> pre_tokenizer_regexes;  // byte-level only
  std::vector<std::string> tokens;                 // index = id
  std::vector<TokenKind> kinds;                    // same size as tokens
  // SentencePiece from GGUF: a pair merges when its concatenation is a normal token, the higher
  // score first. Empty otherwise.
  std::vector<float> scores;
  // By rank (first merges first); used when scores is empty.
  std::vector<std::pair<std::string, std::string>> merges;
  // A pre-tokenizer piece that is a token is that token, without merging (Llama 3).
  bool ignore_merges = false;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  // Other ids that end a generation (may repeat eos_id; duplicates are dropped later).
  std::vector<int32_t> end_of_generation_ids;
  bool add_bos = false;
  bool add_eos = false;
  SpacePrefix space_prefix = SpacePrefix::kNone;
  std::string chat_template;
};

// InvalidArgument when counts differ or an id is out of range; `source` names the input.
absl::Status ValidateVocabulary(const Vocabulary& vocabulary, std::string_view source);

// Adds the ids of control tokens whose text is a conventional end of turn (<|im_end|>,
// <|eot_id|>, <|endoftext|>, ...) to end_of_generation_ids.
void AddConventionalEndOfGenerationIds(Vocabulary& vocabulary);

absl::StatusOr<Vocabulary> VocabularyFromGguf(const GgufFile& gguf);
absl::StatusOr<Vocabulary> VocabularyFromHfDirectory(const std::string& directory);

}  // namespace pulse
