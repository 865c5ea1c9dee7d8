// The one Tokenizer implementation: a Vocabulary turned into lookup tables.
#pragma once

#include <array>
#include <memory>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "core/tokenizer/bpe_merge.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/special_tokens.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocabulary.h"

namespace pulse {

class VocabTokenizer final : public Tokenizer {
 public:
  // InvalidArgument naming `source` when a merge names a token the vocabulary lacks.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(Vocabulary vocabulary,
                                                           std::string_view source);

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options) const override;
  std::string_view TokenPiece(int32_t id) const override;
  std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options) const override;

  int32_t vocab_size() const override { return static_cast<int32_t>(vocabulary_.tokens.size()); }
  TokenKind kind(int32_t id) const override;
  int32_t bos_id() const override { return vocabulary_.bos_id; }
  int32_t eos_id() const override { return vocabulary_.eos_id; }
  std::span<const int32_t> end_of_generation_ids() const override { return end_of_generation_; }
  bool add_bos() const override { return vocabulary_.add_bos; }
  bool add_space_prefix() const override { return vocabulary_.space_prefix != SpacePrefix::kNone; }
  std::string_view model_name() const override;
  std::string_view pre_tokenizer_name() const override { return vocabulary_.pre_tokenizer_name; }
  std::string_view chat_template() const override { return vocabulary_.chat_template; }

  // Use Create, which also builds the merge table.
  VocabTokenizer(Vocabulary vocabulary, PreTokenizer pre_tokenizer);

 private:
  class PieceCache;

  absl::Status BuildMergesFromRanks(std::string_view source);
  void BuildMergesFromScores();
  void BuildPieces();

  bool in_range(int32_t id) const { return id >= 0 && id < vocab_size(); }
  int32_t FindToken(std::string_view text) const;

  // A stretch of text without special tokens; `at_text_start` when it begins the input.
  void EncodeText(std::string_view text, bool at_text_start, PieceCache& cache,
                  std::vector<int32_t>& out) const;
  void EncodeByteLevelPiece(std::string_view piece, std::vector<int32_t>& out) const;
  void EncodeSentencePiece(std::string_view text, bool at_text_start,
                           std::vector<int32_t>& out) const;

  const Vocabulary vocabulary_;
  const PreTokenizer pre_tokenizer_;
  absl::flat_hash_map<std::string_view, int32_t> token_ids_;  // views vocabulary_.tokens
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_;  // the token of each byte's symbol, or -1
  std::vector<std::string> pieces_;
  std::vector<int32_t> end_of_generation_;
  const SpecialTokenMatcher special_tokens_;
};

}  // namespace pulse
