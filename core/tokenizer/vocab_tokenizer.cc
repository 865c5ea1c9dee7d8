#include "core/tokenizer/vocab_tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/utf8_scan.h"

namespace pulse {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr size_t kMaxCachedPieceBytes = 256;

absl::string_view AbslView(std::string_view text) { return {text.data(), text.size()}; }

std::string SpacesFromSymbols(std::string_view text) {
  return absl::StrReplaceAll(AbslView(text), {{AbslView(kSpaceSymbol), " "}});
}

// The byte of a "<0xAB>" token, or -1.
int ByteOfByteToken(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int value = 0;
  for (const char c : text.substr(3, 2)) {
    value *= 16;
    if (c >= '0' && c <= '9') {
      value += c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value += c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value += c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

}  // namespace

// The ids of the pieces already encoded in one Encode call (text repeats words a lot).
class VocabTokenizer::PieceCache {
 public:
  // The cached ids of `piece`, or nullptr.
  const std::span<const int32_t>* Find(std::string_view piece) {
    const auto it = entries_.find(piece);
    if (it == entries_.end()) return nullptr;
    found_ = std::span<const int32_t>(ids_.data() + it->second.first, it->second.second);
    return &found_;
  }
  void Insert(std::string_view piece, std::span<const int32_t> ids) {
    if (piece.size() > kMaxCachedPieceBytes) return;
    entries_.emplace(piece, std::make_pair(ids_.size(), ids.size()));
    ids_.insert(ids_.end(), ids.begin(), ids.end());
  }

 private:
  absl::flat_hash_map<std::string_view, std::pair<size_t, size_t>> entries_;  // views the text
  std::vector<int32_t> ids_;
  std::span<const int32_t> found_;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> VocabTokenizer::Create(Vocabulary vocabulary,
                                                                  std::string_view source) {
  PULSE_RETURN_IF_ERROR(ValidateVocabulary(vocabulary, source));
  PULSE_ASSIGN_OR_RETURN(PreTokenizer pre_tokenizer,
                         PreTokenizer::Create(vocabulary.pre_tokenizer_regexes));
  auto tokenizer =
      std::make_unique<VocabTokenizer>(std::move(vocabulary), std::move(pre_tokenizer));
  if (tokenizer->vocabulary_.scores.empty()) {
    PULSE_RETURN_IF_ERROR(tokenizer->BuildMergesFromRanks(source));
  } else {
    tokenizer->BuildMergesFromScores();
  }
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

VocabTokenizer::VocabTokenizer(Vocabulary vocabulary, PreTokenizer pre_tokenizer)
    : vocabulary_(std::move(vocabulary)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      special_tokens_(vocabulary_.tokens, vocabulary_.kinds) {
  token_ids_.reserve(vocabulary_.tokens.size());
  for (size_t id = 0; id < vocabulary_.tokens.size(); ++id) {
    token_ids_.emplace(vocabulary_.tokens[id], static_cast<int32_t>(id));  // first id wins
  }
  const bool byte_level = vocabulary_.model == VocabularyModel::kByteLevelBpe;
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = byte_level ? FindToken(ByteLevelSymbol(static_cast<uint8_t>(b)))
                              : FindToken(absl::StrFormat("<0x%02X>", b));
  }
  BuildPieces();
  for (const int32_t id : vocabulary_.end_of_generation_ids) {
    if (id != vocabulary_.eos_id && std::find(end_of_generation_.begin(), end_of_generation_.end(),
                                              id) == end_of_generation_.end()) {
      end_of_generation_.push_back(id);
    }
  }
}

int32_t VocabTokenizer::FindToken(std::string_view text) const {
  const auto it = token_ids_.find(text);
  return it == token_ids_.end() ? -1 : it->second;
}

absl::Status VocabTokenizer::BuildMergesFromRanks(std::string_view source) {
  const auto& merges = vocabulary_.merges;
  merges_.reserve(merges.size());
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    merged.assign(left).append(right);
    const int32_t left_id = FindToken(left);
    const int32_t right_id = FindToken(right);
    const int32_t merged_id = FindToken(merged);
    const std::string& missing = left_id < 0 ? left : right_id < 0 ? right : merged;
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(AbslView(source), ": merge ", rank, " '", left,
                                                     " ", right, "': '", missing,
                                                     "' is not in the vocabulary"));
    }
    merges_.try_emplace(MergeKey(left_id, right_id),
                        MergeResult{static_cast<int64_t>(rank), merged_id});
  }
  return absl::OkStatus();
}

void VocabTokenizer::BuildMergesFromScores() {
  // Equal scores share a rank, so that the leftmost of them merges first.
  std::vector<float> distinct = vocabulary_.scores;
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (size_t id = 0; id < vocabulary_.tokens.size(); ++id) {
    if (vocabulary_.kinds[id] != TokenKind::kNormal) continue;
    const std::string_view text = vocabulary_.tokens[id];
    const int64_t rank = std::lower_bound(distinct.begin(), distinct.end(), vocabulary_.scores[id],
                                          std::greater<float>()) -
                         distinct.begin();
    for (size_t split = 1; split < text.size(); ++split) {
      if ((static_cast<uint8_t>(text[split]) & 0xC0) == 0x80) continue;  // inside a character
      const int32_t left_id = FindToken(text.substr(0, split));
      const int32_t right_id = FindToken(text.substr(split));
      if (left_id < 0 || right_id < 0) continue;
      const auto [it, inserted] = merges_.try_emplace(MergeKey(left_id, right_id),
                                                      MergeResult{rank, static_cast<int32_t>(id)});
      if (!inserted && rank < it->second.rank) it->second = {rank, static_cast<int32_t>(id)};
    }
  }
}

void VocabTokenizer::BuildPieces() {
  const bool byte_level = vocabulary_.model == VocabularyModel::kByteLevelBpe;
  pieces_.reserve(vocabulary_.tokens.size());
  for (size_t id = 0; id < vocabulary_.tokens.size(); ++id) {
    const std::string& text = vocabulary_.tokens[id];
    const TokenKind kind = vocabulary_.kinds[id];
    const int byte = ByteOfByteToken(text);
    if (kind == TokenKind::kControl || kind == TokenKind::kUserDefined) {
      pieces_.push_back(text);
    } else if (kind == TokenKind::kByte && byte >= 0) {
      pieces_.emplace_back(1, static_cast<char>(byte));
    } else {
      pieces_.push_back(byte_level ? ByteLevelDecode(text) : SpacesFromSymbols(text));
    }
  }
}

TokenKind VocabTokenizer::kind(int32_t id) const {
  return in_range(id) ? vocabulary_.kinds[id] : TokenKind::kUnused;
}

std::string_view VocabTokenizer::model_name() const {
  return vocabulary_.model == VocabularyModel::kByteLevelBpe ? "gpt2" : "llama";
}

std::string_view VocabTokenizer::TokenPiece(int32_t id) const {
  return in_range(id) ? std::string_view(pieces_[id]) : std::string_view();
}

std::vector<int32_t> VocabTokenizer::Encode(std::string_view text,
                                            const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (options.add_special && vocabulary_.add_bos && vocabulary_.bos_id >= 0) {
    ids.push_back(vocabulary_.bos_id);
  }
  std::vector<TextSegment> segments;
  special_tokens_.Split(text, options.parse_special, segments);
  PieceCache cache;
  for (const TextSegment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      EncodeText(segment.text, segment.text.data() == text.data(), cache, ids);
    }
  }
  if (options.add_special && vocabulary_.add_eos && vocabulary_.eos_id >= 0) {
    ids.push_back(vocabulary_.eos_id);
  }
  return ids;
}

void VocabTokenizer::EncodeText(std::string_view text, bool at_text_start, PieceCache& cache,
                                std::vector<int32_t>& out) const {
  if (vocabulary_.model == VocabularyModel::kSentencePiece) {
    EncodeSentencePiece(text, at_text_start, out);
    return;
  }
  // Each well-formed stretch is pre-tokenized on its own; a byte of no valid character is a
  // piece by itself, so it becomes its own byte-level token.
  std::vector<std::string_view> pieces;
  ForEachUtf8Run(
      text, [&](std::string_view run) { pre_tokenizer_.Split(run, pieces); },
      [&](std::string_view byte) { pieces.push_back(byte); });
  std::vector<int32_t> piece_ids;
  for (const std::string_view piece : pieces) {
    if (const std::span<const int32_t>* cached = cache.Find(piece)) {
      out.insert(out.end(), cached->begin(), cached->end());
      continue;
    }
    piece_ids.clear();
    EncodeByteLevelPiece(piece, piece_ids);
    cache.Insert(piece, piece_ids);
    out.insert(out.end(), piece_ids.begin(), piece_ids.end());
  }
}

void VocabTokenizer::EncodeByteLevelPiece(std::string_view piece, std::vector<int32_t>& out) const {
  if (vocabulary_.ignore_merges) {
    const int32_t whole = FindToken(ByteLevelEncode(piece));
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  for (const char c : piece) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  ApplyMerges(merges_, symbols);
  // A byte the vocabulary has no symbol for (SmolLM2's lacks 21 byte values, 0x04, 0xC0, 0xF1
  // and 0xFF among them) is dropped, as Hugging Face tokenizers drops it; GGUF's unknown token is
  // often a control token (<|endoftext|>) that must not appear in the middle of a text.
  for (const int32_t id : symbols) {
    if (id >= 0) out.push_back(id);
  }
}

void VocabTokenizer::EncodeSentencePiece(std::string_view text, bool at_text_start,
                                         std::vector<int32_t>& out) const {
  const bool starts_with_space = text.starts_with(' ');
  bool prefix = false;
  switch (vocabulary_.space_prefix) {
    case SpacePrefix::kNone:
      break;
    case SpacePrefix::kEverySegment:
      prefix = true;
      break;
    case SpacePrefix::kMetaspaceAlways:
      prefix = !starts_with_space;
      break;
    case SpacePrefix::kMetaspaceFirst:
      prefix = at_text_start && !starts_with_space;
      break;
  }
  const std::string normalized =
      absl::StrCat(prefix ? AbslView(kSpaceSymbol) : "",
                   absl::StrReplaceAll(AbslView(text), {{" ", AbslView(kSpaceSymbol)}}));
  std::vector<int32_t> symbols;
  symbols.reserve(normalized.size());
  const std::string_view rest_of_text = normalized;
  size_t pos = 0;
  while (pos < normalized.size()) {
    const size_t length = Utf8SequenceLength(rest_of_text.substr(pos));
    const std::string_view character = rest_of_text.substr(pos, length == 0 ? 1 : length);
    pos += character.size();
    const int32_t id = length == 0 ? -1 : FindToken(character);
    if (id >= 0) {
      symbols.push_back(id);
      continue;
    }
    // Byte fallback: a character the vocabulary lacks (or an invalid byte) as <0xAB> tokens.
    bool all_bytes = true;
    for (const char c : character) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (const char c : character) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    } else if (vocabulary_.unk_id >= 0) {
      symbols.push_back(vocabulary_.unk_id);
    }
  }
  ApplyMerges(merges_, symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::string VocabTokenizer::Decode(std::span<const int32_t> ids,
                                   const DecodeOptions& options) const {
  std::string text;
  for (const int32_t id : ids) {
    if (!in_range(id)) continue;
    if (vocabulary_.kinds[id] == TokenKind::kControl && !options.render_special) continue;
    text += pieces_[id];
  }
  if (add_space_prefix() && text.starts_with(' ')) text.erase(0, 1);
  return text;
}

}  // namespace pulse
