#include "core/tokenizer/tokenizer.h"

#include "core/tokenizer/vocab_tokenizer.h"
#include "core/tokenizer/vocabulary.h"

namespace pulse {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  PULSE_ASSIGN_OR_RETURN(Vocabulary vocabulary, VocabularyFromGguf(gguf));
  return VocabTokenizer::Create(std::move(vocabulary), gguf.path());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHfDirectory(
    const std::string& directory) {
  PULSE_ASSIGN_OR_RETURN(Vocabulary vocabulary, VocabularyFromHfDirectory(directory));
  return VocabTokenizer::Create(std::move(vocabulary), directory + "/tokenizer.json");
}

}  // namespace pulse
