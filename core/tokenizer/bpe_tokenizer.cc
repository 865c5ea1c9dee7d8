#include "core/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <limits>
#include <span>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/byte_level.h"

namespace pulse {
namespace {

bool IsSpecial(TokenKind kind) {
  return kind == TokenKind::kControl || kind == TokenKind::kUserDefined;
}

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(BpeVocabulary vocabulary, std::unique_ptr<PreTokenizer> pre_tokenizer)
      : vocabulary_(std::move(vocabulary)), pre_tokenizer_(std::move(pre_tokenizer)) {}

  absl::Status Index() {
    const int32_t size = vocab_size();
    pieces_.reserve(vocabulary_.tokens.size());
    for (int32_t id = 0; id < size; ++id) {
      const std::string& text = vocabulary_.tokens[id];
      ids_.try_emplace(text, id);
      if (IsSpecial(vocabulary_.kinds[id]) && !text.empty()) {
        specials_.emplace_back(text, id);
        pieces_.push_back(text);
      } else {
        pieces_.push_back(ByteLevelDecode(text));
      }
    }
    // Longest first, so that a special token that extends another wins.
    std::stable_sort(specials_.begin(), specials_.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    for (size_t rank = 0; rank < vocabulary_.merges.size(); ++rank) {
      const std::string& merge = vocabulary_.merges[rank];
      const size_t space = merge.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == merge.size() ||
          merge.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("merge ", rank, " '", merge, "' is not two symbols separated by a space"));
      }
      ranks_.try_emplace(merge, static_cast<int32_t>(rank));
    }
    for (const int32_t id : {vocabulary_.bos_id, vocabulary_.eos_id, vocabulary_.eot_id}) {
      if (id >= size) {
        return absl::InvalidArgumentError(
            absl::StrCat("special token id ", id, " is outside the vocabulary of ", size));
      }
    }
    if (vocabulary_.eos_id >= 0) end_ids_.push_back(vocabulary_.eos_id);
    if (vocabulary_.eot_id >= 0 && vocabulary_.eot_id != vocabulary_.eos_id) {
      end_ids_.push_back(vocabulary_.eot_id);
    }
    return absl::OkStatus();
  }

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options) const override {
    std::vector<int32_t> ids;
    if (options.add_special && vocabulary_.add_bos && vocabulary_.bos_id >= 0) {
      ids.push_back(vocabulary_.bos_id);
    }
    absl::flat_hash_map<std::string_view, std::vector<int32_t>> cache;
    size_t plain = 0;  // start of the text not yet encoded
    for (size_t i = 0; i < text.size();) {
      const int32_t special = options.parse_special ? SpecialAt(text, i) : -1;
      if (special < 0) {
        ++i;
        continue;
      }
      EncodePlain(text.substr(plain, i - plain), cache, ids);
      ids.push_back(special);
      i += vocabulary_.tokens[special].size();
      plain = i;
    }
    EncodePlain(text.substr(plain), cache, ids);
    if (options.add_special && vocabulary_.add_eos && vocabulary_.eos_id >= 0) {
      ids.push_back(vocabulary_.eos_id);
    }
    return ids;
  }

  std::string_view TokenPiece(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? std::string_view(pieces_[id]) : std::string_view();
  }

  std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options) const override {
    std::string text;
    for (const int32_t id : ids) {
      if (kind(id) == TokenKind::kControl && !options.render_special) continue;
      text += TokenPiece(id);
    }
    return text;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(vocabulary_.tokens.size()); }
  TokenKind kind(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? vocabulary_.kinds[id] : TokenKind::kUnused;
  }
  int32_t bos_id() const override { return vocabulary_.bos_id; }
  int32_t eos_id() const override { return vocabulary_.eos_id; }
  std::span<const int32_t> end_of_generation_ids() const override { return end_ids_; }
  bool add_bos() const override { return vocabulary_.add_bos; }
  bool add_space_prefix() const override { return false; }
  std::string_view model_name() const override { return "gpt2"; }
  std::string_view pre_tokenizer_name() const override { return vocabulary_.pre_tokenizer; }
  std::string_view chat_template() const override { return vocabulary_.chat_template; }

 private:
  // The special token written at text[at], longest first, or -1.
  int32_t SpecialAt(std::string_view text, size_t at) const {
    for (const auto& [special, id] : specials_) {
      if (text.substr(at, special.size()) == special) return id;
    }
    return -1;
  }

  void EncodePlain(std::string_view text,
                   absl::flat_hash_map<std::string_view, std::vector<int32_t>>& cache,
                   std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    for (const std::string_view piece : pre_tokenizer_->Split(text)) {
      auto [it, inserted] = cache.try_emplace(piece);
      if (inserted) it->second = MergePiece(piece);
      ids.insert(ids.end(), it->second.begin(), it->second.end());
    }
  }

  // BPE over one piece: its bytes as alphabet symbols, the lowest-ranked adjacent pair merged
  // until no pair has a merge.
  std::vector<int32_t> MergePiece(std::string_view piece) const {
    std::vector<std::string> symbols;
    symbols.reserve(piece.size());
    for (const char byte : piece)
      symbols.push_back(ByteLevelAlphabet()[static_cast<uint8_t>(byte)]);
    std::string pair;
    while (symbols.size() > 1) {
      int32_t best_rank = std::numeric_limits<int32_t>::max();
      size_t best = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        pair.assign(symbols[i]).append(" ").append(symbols[i + 1]);
        const auto it = ranks_.find(pair);
        if (it != ranks_.end() && it->second < best_rank) {
          best_rank = it->second;
          best = i;
        }
      }
      if (best_rank == std::numeric_limits<int32_t>::max()) break;
      symbols[best] += symbols[best + 1];
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    std::vector<int32_t> ids;
    ids.reserve(symbols.size());
    for (const std::string& symbol : symbols) {
      const auto it = ids_.find(symbol);
      if (it != ids_.end()) {
        ids.push_back(it->second);
        continue;
      }
      // A symbol the vocabulary lacks: fall back to its bytes' symbols, which a byte-level
      // vocabulary always has.
      for (const char byte : ByteLevelDecode(symbol)) {
        const auto byte_it = ids_.find(ByteLevelAlphabet()[static_cast<uint8_t>(byte)]);
        if (byte_it != ids_.end()) ids.push_back(byte_it->second);
      }
    }
    return ids;
  }

  const BpeVocabulary vocabulary_;
  const std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<std::string> pieces_;  // decoded bytes a token
  absl::flat_hash_map<std::string, int32_t> ids_;
  absl::flat_hash_map<std::string, int32_t> ranks_;
  std::vector<std::pair<std::string, int32_t>> specials_;
  std::vector<int32_t> end_ids_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateBpeTokenizer(BpeVocabulary vocabulary) {
  if (vocabulary.tokens.empty()) return absl::InvalidArgumentError("the vocabulary is empty");
  if (vocabulary.kinds.empty())
    vocabulary.kinds.assign(vocabulary.tokens.size(), TokenKind::kNormal);
  if (vocabulary.kinds.size() != vocabulary.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("there are ", vocabulary.tokens.size(),
                                                   " tokens but ", vocabulary.kinds.size(),
                                                   " token types"));
  }
  PULSE_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> pre_tokenizer,
                         PreTokenizer::Create(vocabulary.pre_tokenizer));
  auto tokenizer = std::make_unique<BpeTokenizer>(std::move(vocabulary), std::move(pre_tokenizer));
  PULSE_RETURN_IF_ERROR(tokenizer->Index());
  return tokenizer;
}

}  // namespace pulse
