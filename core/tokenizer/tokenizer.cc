#include "core/tokenizer/tokenizer.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/bpe_tokenizer.h"

namespace pulse {
namespace {

// An optional integer key: `fallback` when absent.
absl::StatusOr<int64_t> IntOr(const GgufFile& gguf, std::string_view key, int64_t fallback) {
  return gguf.Has(key) ? gguf.GetInt(key) : fallback;
}

absl::StatusOr<bool> BoolOr(const GgufFile& gguf, std::string_view key, bool fallback) {
  return gguf.Has(key) ? gguf.GetBool(key) : fallback;
}

absl::StatusOr<TokenKind> ToKind(int64_t type, size_t id) {
  if (type < 1 || type > 6) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", id, " has type ", type, ", outside GGUF's token types 1..6"));
  }
  return static_cast<TokenKind>(type);
}

absl::StatusOr<int32_t> SpecialId(const GgufFile& gguf, std::string_view key) {
  PULSE_ASSIGN_OR_RETURN(const int64_t id, IntOr(gguf, key, -1));
  if (id < -1 || id > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(key.data(), key.size()), " = ", id, " is not a token id"));
  }
  return static_cast<int32_t>(id);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  if (!gguf.Has("tokenizer.ggml.model")) {
    return absl::NotFoundError("the file has no tokenizer (tokenizer.ggml.model)");
  }
  PULSE_ASSIGN_OR_RETURN(const std::string model, gguf.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat("unsupported tokenizer model '", model,
                                                 "' (this build reads byte-level BPE, 'gpt2')"));
  }
  BpeVocabulary vocabulary;
  PULSE_ASSIGN_OR_RETURN(vocabulary.tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  PULSE_ASSIGN_OR_RETURN(vocabulary.merges, gguf.GetStringArray("tokenizer.ggml.merges"));
  if (gguf.Has("tokenizer.ggml.token_type")) {
    PULSE_ASSIGN_OR_RETURN(const std::vector<int64_t> types,
                           gguf.GetIntArray("tokenizer.ggml.token_type"));
    for (size_t id = 0; id < types.size(); ++id) {
      PULSE_ASSIGN_OR_RETURN(const TokenKind kind, ToKind(types[id], id));
      vocabulary.kinds.push_back(kind);
    }
  }
  PULSE_ASSIGN_OR_RETURN(vocabulary.bos_id, SpecialId(gguf, "tokenizer.ggml.bos_token_id"));
  PULSE_ASSIGN_OR_RETURN(vocabulary.eos_id, SpecialId(gguf, "tokenizer.ggml.eos_token_id"));
  PULSE_ASSIGN_OR_RETURN(vocabulary.eot_id, SpecialId(gguf, "tokenizer.ggml.eot_token_id"));
  PULSE_ASSIGN_OR_RETURN(vocabulary.add_bos, BoolOr(gguf, "tokenizer.ggml.add_bos_token", false));
  PULSE_ASSIGN_OR_RETURN(vocabulary.add_eos, BoolOr(gguf, "tokenizer.ggml.add_eos_token", false));
  vocabulary.pre_tokenizer = "default";
  if (gguf.Has("tokenizer.ggml.pre")) {
    PULSE_ASSIGN_OR_RETURN(vocabulary.pre_tokenizer, gguf.GetString("tokenizer.ggml.pre"));
  }
  if (gguf.Has("tokenizer.chat_template")) {
    PULSE_ASSIGN_OR_RETURN(vocabulary.chat_template, gguf.GetString("tokenizer.chat_template"));
  }
  return CreateBpeTokenizer(std::move(vocabulary));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHfDirectory(
    const std::string& directory) {
  std::error_code error;
  if (std::filesystem::exists(directory + "/tokenizer.json", error)) {
    return absl::UnimplementedError(absl::StrCat(
        "reading ", directory,
        "/tokenizer.json is not implemented yet; the model loads without a tokenizer"));
  }
  return absl::NotFoundError(absl::StrCat("no tokenizer.json in ", directory));
}

}  // namespace pulse
