#include "core/tokenizer/vocabulary.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace pulse {
namespace {

absl::string_view AbslView(std::string_view text) { return {text.data(), text.size()}; }

absl::Status CheckId(int32_t id, size_t vocab_size, std::string_view what,
                     std::string_view source) {
  if (id < -1 || id >= static_cast<int64_t>(vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(source), ": ", AbslView(what), " ", id,
                                                   " is outside the vocabulary of ", vocab_size,
                                                   " tokens"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateVocabulary(const Vocabulary& vocabulary, std::string_view source) {
  const size_t n = vocabulary.tokens.size();
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(source), ": the vocabulary is empty"));
  }
  if (n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(source), ": ", n, " tokens is too many"));
  }
  if (vocabulary.kinds.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(source), ": ", vocabulary.kinds.size(),
                                                   " token types for ", n, " tokens"));
  }
  if (!vocabulary.scores.empty() && vocabulary.scores.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(source), ": ", vocabulary.scores.size(),
                                                   " token scores for ", n, " tokens"));
  }
  PULSE_RETURN_IF_ERROR(CheckId(vocabulary.bos_id, n, "bos token id", source));
  PULSE_RETURN_IF_ERROR(CheckId(vocabulary.eos_id, n, "eos token id", source));
  PULSE_RETURN_IF_ERROR(CheckId(vocabulary.unk_id, n, "unknown token id", source));
  for (const int32_t id : vocabulary.end_of_generation_ids) {
    PULSE_RETURN_IF_ERROR(CheckId(id, n, "end-of-generation token id", source));
  }
  return absl::OkStatus();
}

void AddConventionalEndOfGenerationIds(Vocabulary& vocabulary) {
  static constexpr std::array<std::string_view, 8> kEndOfTurn = {
      "<|im_end|>", "<|eot_id|>",      "<|eom_id|>",    "<|endoftext|>",
      "<|end|>",    "<|end_of_text|>", "<end_of_turn>", "</s>"};
  for (size_t id = 0; id < vocabulary.tokens.size(); ++id) {
    if (vocabulary.kinds[id] != TokenKind::kControl) continue;
    for (const std::string_view text : kEndOfTurn) {
      if (vocabulary.tokens[id] == text) {
        vocabulary.end_of_generation_ids.push_back(static_cast<int32_t>(id));
      }
    }
  }
}

}  // namespace pulse
