// The tokenizer.ggml.* metadata of a GGUF file, as llama.cpp writes it.
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/vocabulary.h"

namespace pulse {
namespace {

absl::string_view AbslView(std::string_view text) { return {text.data(), text.size()}; }

// The value of an optional key: nullopt when absent, an error when present with a wrong type.
template <typename T, typename Getter>
absl::StatusOr<std::optional<T>> Optional(const GgufFile& gguf, std::string_view key,
                                          Getter getter) {
  if (!gguf.Has(key)) return std::optional<T>();
  PULSE_ASSIGN_OR_RETURN(T value, (gguf.*getter)(key));
  return std::optional<T>(std::move(value));
}

// A key the tokenizer needs: absent is InvalidArgument (the file has a tokenizer, a broken one).
absl::Status Require(const GgufFile& gguf, std::string_view key, std::string_view model) {
  if (gguf.Has(key)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(gguf.path(), ": ", AbslView(key),
                                                 " is missing (a '", AbslView(model),
                                                 "' tokenizer needs it)"));
}

absl::StatusOr<bool> OptionalBool(const GgufFile& gguf, std::string_view key, bool fallback) {
  PULSE_ASSIGN_OR_RETURN(const std::optional<bool> value,
                         Optional<bool>(gguf, key, &GgufFile::GetBool));
  return value.value_or(fallback);
}

// -1 when absent; InvalidArgument when the id is negative or too large for an id.
absl::StatusOr<int32_t> OptionalId(const GgufFile& gguf, std::string_view key) {
  PULSE_ASSIGN_OR_RETURN(const std::optional<int64_t> value,
                         Optional<int64_t>(gguf, key, &GgufFile::GetInt));
  if (!value.has_value()) return -1;
  if (*value < 0 || *value > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(gguf.path(), ": ", AbslView(key), " ", *value, " is not a token id"));
  }
  return static_cast<int32_t>(*value);
}

absl::StatusOr<std::vector<TokenKind>> ReadKinds(const GgufFile& gguf, size_t count) {
  constexpr std::string_view kKey = "tokenizer.ggml.token_type";
  if (!gguf.Has(kKey)) return std::vector<TokenKind>(count, TokenKind::kNormal);
  PULSE_ASSIGN_OR_RETURN(const std::vector<int64_t> types, gguf.GetIntArray(kKey));
  if (types.size() != count) {
    return absl::InvalidArgumentError(absl::StrCat(gguf.path(), ": ", AbslView(kKey), " has ",
                                                   types.size(), " entries for ", count,
                                                   " tokens"));
  }
  std::vector<TokenKind> kinds;
  kinds.reserve(count);
  for (size_t id = 0; id < count; ++id) {
    const int64_t type = types[id];
    if (type < static_cast<int64_t>(TokenKind::kNormal) ||
        type > static_cast<int64_t>(TokenKind::kByte)) {
      return absl::InvalidArgumentError(absl::StrCat(gguf.path(), ": ", AbslView(kKey), "[", id,
                                                     "] is ", type, ", not a token type (1..6)"));
    }
    kinds.push_back(static_cast<TokenKind>(type));
  }
  return kinds;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadMerges(const GgufFile& gguf) {
  constexpr std::string_view kKey = "tokenizer.ggml.merges";
  PULSE_ASSIGN_OR_RETURN(const std::vector<std::string> lines, gguf.GetStringArray(kKey));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    // A token never starts with the separator, so the first space after byte 0 splits.
    const size_t space = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 >= line.size()) {
      return absl::InvalidArgumentError(absl::StrCat(gguf.path(), ": ", AbslView(kKey), "[", i,
                                                     "] '", line,
                                                     "' is not two tokens separated by a space"));
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

}  // namespace

absl::StatusOr<Vocabulary> VocabularyFromGguf(const GgufFile& gguf) {
  if (!gguf.Has("tokenizer.ggml.model")) {
    return absl::NotFoundError(
        absl::StrCat(gguf.path(), " has no tokenizer (no tokenizer.ggml.model)"));
  }
  PULSE_ASSIGN_OR_RETURN(const std::string model, gguf.GetString("tokenizer.ggml.model"));
  Vocabulary vocabulary;
  if (model == "gpt2") {
    vocabulary.model = VocabularyModel::kByteLevelBpe;
  } else if (model == "llama") {
    vocabulary.model = VocabularyModel::kSentencePiece;
  } else {
    return absl::UnimplementedError(absl::StrCat(gguf.path(), ": unsupported tokenizer model '",
                                                 model, "' (supported: gpt2, llama)"));
  }
  const bool sentence_piece = vocabulary.model == VocabularyModel::kSentencePiece;

  PULSE_RETURN_IF_ERROR(Require(gguf, "tokenizer.ggml.tokens", model));
  PULSE_ASSIGN_OR_RETURN(vocabulary.tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  PULSE_ASSIGN_OR_RETURN(vocabulary.kinds, ReadKinds(gguf, vocabulary.tokens.size()));
  if (sentence_piece) {
    PULSE_RETURN_IF_ERROR(Require(gguf, "tokenizer.ggml.scores", model));
    PULSE_ASSIGN_OR_RETURN(vocabulary.scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
  } else {
    PULSE_RETURN_IF_ERROR(Require(gguf, "tokenizer.ggml.merges", model));
    PULSE_ASSIGN_OR_RETURN(vocabulary.merges, ReadMerges(gguf));
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> pre,
                           Optional<std::string>(gguf, "tokenizer.ggml.pre", &GgufFile::GetString));
    vocabulary.pre_tokenizer_name = pre.value_or("gpt2");
    auto patterns = PreTokenizerPatterns(vocabulary.pre_tokenizer_name);
    if (!patterns.ok()) {
      return absl::Status(patterns.status().code(),
                          absl::StrCat(gguf.path(), ": ", patterns.status().message()));
    }
    vocabulary.pre_tokenizer_regexes = *std::move(patterns);
    // llama.cpp takes a Llama 3 piece that is a token as that token.
    vocabulary.ignore_merges =
        vocabulary.pre_tokenizer_name == "llama-bpe" || vocabulary.pre_tokenizer_name == "llama3";
  }

  PULSE_ASSIGN_OR_RETURN(vocabulary.bos_id, OptionalId(gguf, "tokenizer.ggml.bos_token_id"));
  PULSE_ASSIGN_OR_RETURN(vocabulary.eos_id, OptionalId(gguf, "tokenizer.ggml.eos_token_id"));
  PULSE_ASSIGN_OR_RETURN(vocabulary.unk_id, OptionalId(gguf, "tokenizer.ggml.unknown_token_id"));
  for (const std::string_view key :
       {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    PULSE_ASSIGN_OR_RETURN(const int32_t id, OptionalId(gguf, key));
    if (id >= 0) vocabulary.end_of_generation_ids.push_back(id);
  }
  PULSE_ASSIGN_OR_RETURN(const int32_t pad_id, OptionalId(gguf, "tokenizer.ggml.padding_token_id"));
  if (pad_id >= static_cast<int64_t>(vocabulary.tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat(gguf.path(), ": padding token id ", pad_id,
                                                   " is outside the vocabulary of ",
                                                   vocabulary.tokens.size(), " tokens"));
  }
  PULSE_ASSIGN_OR_RETURN(vocabulary.add_bos,
                         OptionalBool(gguf, "tokenizer.ggml.add_bos_token", sentence_piece));
  PULSE_ASSIGN_OR_RETURN(vocabulary.add_eos,
                         OptionalBool(gguf, "tokenizer.ggml.add_eos_token", false));
  PULSE_ASSIGN_OR_RETURN(const bool space_prefix,
                         OptionalBool(gguf, "tokenizer.ggml.add_space_prefix", sentence_piece));
  vocabulary.space_prefix =
      sentence_piece && space_prefix ? SpacePrefix::kEverySegment : SpacePrefix::kNone;
  PULSE_ASSIGN_OR_RETURN(
      const std::optional<std::string> chat_template,
      Optional<std::string>(gguf, "tokenizer.chat_template", &GgufFile::GetString));
  vocabulary.chat_template = chat_template.value_or("");
  PULSE_RETURN_IF_ERROR(ValidateVocabulary(vocabulary, gguf.path()));
  AddConventionalEndOfGenerationIds(vocabulary);
  return vocabulary;
}

}  // namespace pulse
