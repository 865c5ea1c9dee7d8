// A Hugging Face tokenizer directory: tokenizer.json (a BPE model with its normalizer,
// pre-tokenizer, post-processor and added tokens), tokenizer_config.json (special tokens,
// add_bos_token, chat_template) and generation_config.json (end-of-generation ids).
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/mapped_file.h"
#include "core/format/json_text.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/vocabulary.h"

namespace pulse {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581

absl::string_view AbslView(std::string_view text) { return {text.data(), text.size()}; }

// Tokenizer files run to tens of MB for the largest vocabularies.
constexpr size_t kMaxFileBytes = size_t{512} << 20;

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  return ReadFileText(path.string(), kMaxFileBytes);
}

absl::StatusOr<Json> ReadJsonObject(const std::filesystem::path& path) {
  PULSE_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  PULSE_ASSIGN_OR_RETURN(Json json, ParseJsonText(text, path.string()));
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " is not a JSON object"));
  }
  return json;
}

// The member `key` of an object, or nullptr when it is absent or null.
const Json* Member(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// The string member `key`, nullopt when absent; an error naming `where` when not a string.
absl::StatusOr<std::optional<std::string>> StringMember(const Json& object, std::string_view key,
                                                        std::string_view where) {
  const Json* value = Member(object, key);
  if (value == nullptr) return std::optional<std::string>();
  if (!value->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(where), ": \"", AbslView(key), "\" is not a string"));
  }
  return std::optional<std::string>(value->get<std::string>());
}

absl::StatusOr<std::optional<bool>> BoolMember(const Json& object, std::string_view key,
                                               std::string_view where) {
  const Json* value = Member(object, key);
  if (value == nullptr) return std::optional<bool>();
  if (!value->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(where), ": \"", AbslView(key), "\" is not true or false"));
  }
  return std::optional<bool>(value->get<bool>());
}

std::string TypeOf(const Json& object) {
  const Json* type = Member(object, "type");
  return type != nullptr && type->is_string() ? type->get<std::string>() : std::string();
}

absl::Status Unsupported(std::string_view where, std::string_view what, std::string_view name) {
  return absl::UnimplementedError(
      absl::StrCat(AbslView(where), ": unsupported ", AbslView(what), " '", AbslView(name), "'"));
}

// PCRE2 syntax for a literal string.
std::string QuoteRegex(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       static_cast<unsigned char>(c) >= 0x80;
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// What the pre-tokenizer and normalizer amount to.
struct TextPipeline {
  std::vector<std::string> regexes;  // Split / Digits / ByteLevel(use_regex) steps, in order
  bool byte_level = false;
  bool spaces_to_symbols = false;  // Replace(" ", "▁") or Metaspace
  SpacePrefix space_prefix = SpacePrefix::kNone;
};

absl::Status AddPreTokenizer(const Json& step, std::string_view where, TextPipeline& pipeline) {
  const std::string type = TypeOf(step);
  if (pipeline.byte_level) {
    return absl::UnimplementedError(absl::StrCat(
        AbslView(where), ": a '", type, "' pre-tokenizer after ByteLevel is not supported"));
  }
  if (type == "Sequence") {
    const Json* steps = Member(step, "pretokenizers");
    if (steps == nullptr || !steps->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(where), ": a Sequence pre-tokenizer without \"pretokenizers\""));
    }
    for (const Json& inner : *steps) PULSE_RETURN_IF_ERROR(AddPreTokenizer(inner, where, pipeline));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    PULSE_ASSIGN_OR_RETURN(const std::optional<bool> add_prefix_space,
                           BoolMember(step, "add_prefix_space", where));
    if (add_prefix_space.value_or(false)) {
      return Unsupported(where, "pre-tokenizer", "ByteLevel with add_prefix_space");
    }
    PULSE_ASSIGN_OR_RETURN(const std::optional<bool> use_regex,
                           BoolMember(step, "use_regex", where));
    if (use_regex.value_or(true)) pipeline.regexes.emplace_back(kGpt2Pattern);
    pipeline.byte_level = true;
    return absl::OkStatus();
  }
  if (type == "Split") {
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> behavior,
                           StringMember(step, "behavior", where));
    PULSE_ASSIGN_OR_RETURN(const std::optional<bool> invert, BoolMember(step, "invert", where));
    if (behavior.value_or("") != "Isolated" || invert.value_or(false)) {
      return Unsupported(
          where, "Split pre-tokenizer behavior",
          absl::StrCat(behavior.value_or("(none)"), invert.value_or(false) ? ", inverted" : ""));
    }
    const Json* pattern = Member(step, "pattern");
    if (pattern == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(where), ": a Split pre-tokenizer without a pattern"));
    }
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> regex,
                           StringMember(*pattern, "Regex", where));
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> literal,
                           StringMember(*pattern, "String", where));
    if (!regex.has_value() && !literal.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          AbslView(where), ": a Split pattern is neither {\"Regex\": ...} nor {\"String\": ...}"));
    }
    pipeline.regexes.push_back(regex.has_value() ? *regex : QuoteRegex(*literal));
    return absl::OkStatus();
  }
  if (type == "Digits") {
    PULSE_ASSIGN_OR_RETURN(const std::optional<bool> individual,
                           BoolMember(step, "individual_digits", where));
    pipeline.regexes.emplace_back(individual.value_or(false) ? kIndividualDigitsPattern
                                                             : R"(\p{N}+)");
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> replacement,
                           StringMember(step, "replacement", where));
    PULSE_ASSIGN_OR_RETURN(const std::optional<bool> split, BoolMember(step, "split", where));
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> scheme,
                           StringMember(step, "prepend_scheme", where));
    PULSE_ASSIGN_OR_RETURN(const std::optional<bool> add_prefix_space,
                           BoolMember(step, "add_prefix_space", where));
    if (replacement.value_or("") != kSpaceSymbol) {
      return Unsupported(where, "Metaspace replacement", replacement.value_or("(none)"));
    }
    if (split.value_or(true)) return Unsupported(where, "pre-tokenizer", "Metaspace with split");
    const std::string prepend =
        scheme.value_or(add_prefix_space.value_or(true) ? "always" : "never");
    if (prepend == "always") {
      pipeline.space_prefix = SpacePrefix::kMetaspaceAlways;
    } else if (prepend == "first") {
      pipeline.space_prefix = SpacePrefix::kMetaspaceFirst;
    } else if (prepend != "never") {
      return Unsupported(where, "Metaspace prepend_scheme", prepend);
    }
    pipeline.spaces_to_symbols = true;
    return absl::OkStatus();
  }
  return Unsupported(where, "pre-tokenizer", type);
}

absl::Status AddNormalizer(const Json& step, std::string_view where, TextPipeline& pipeline) {
  const std::string type = TypeOf(step);
  if (type == "Sequence") {
    const Json* steps = Member(step, "normalizers");
    if (steps == nullptr || !steps->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(where), ": a Sequence normalizer without \"normalizers\""));
    }
    for (const Json& inner : *steps) PULSE_RETURN_IF_ERROR(AddNormalizer(inner, where, pipeline));
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> prepend,
                           StringMember(step, "prepend", where));
    if (prepend.value_or("") != kSpaceSymbol) {
      return Unsupported(where, "Prepend normalizer of", prepend.value_or("(none)"));
    }
    pipeline.space_prefix = SpacePrefix::kEverySegment;
    return absl::OkStatus();
  }
  if (type == "Replace") {
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> content,
                           StringMember(step, "content", where));
    const Json* pattern = Member(step, "pattern");
    std::optional<std::string> from;
    if (pattern != nullptr) {
      PULSE_ASSIGN_OR_RETURN(from, StringMember(*pattern, "String", where));
    }
    if (from.value_or("") != " " || content.value_or("") != kSpaceSymbol) {
      return Unsupported(where, "Replace normalizer", "other than ' ' by U+2581");
    }
    pipeline.spaces_to_symbols = true;
    return absl::OkStatus();
  }
  // Text is taken to be in NFC already, as llama.cpp does for the same models.
  if (type == "NFC") return absl::OkStatus();
  return Unsupported(where, "normalizer", type);
}

// Merges as "a b" strings or ["a", "b"] pairs.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadMerges(
    const Json& model, std::string_view where) {
  std::vector<std::pair<std::string, std::string>> merges;
  const Json* list = Member(model, "merges");
  if (list == nullptr) return merges;
  if (!list->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(where), ": merges is not a list"));
  }
  merges.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& merge = (*list)[i];
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 >= text.size() ||
          text.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(AbslView(where), ": merge ", i, " '", text,
                                                       "' is not two tokens separated by a space"));
      }
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(where), ": merge ", i, " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
  }
  return merges;
}

absl::Status CheckUnsupportedModelOptions(const Json& model, std::string_view where) {
  const Json* dropout = Member(model, "dropout");
  if (dropout != nullptr && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return Unsupported(where, "BPE option", "dropout");
  }
  for (const std::string_view key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> value, StringMember(model, key, where));
    if (!value.value_or("").empty()) return Unsupported(where, "BPE option", key);
  }
  return absl::OkStatus();
}

// Tokens (by id) and kinds from the model's vocab and the added tokens.
absl::Status ReadTokens(const Json& root, const Json& model, bool byte_fallback,
                        std::string_view where, Vocabulary& vocabulary) {
  const Json* vocab = Member(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(where), ": the model has no \"vocab\" object"));
  }
  std::vector<std::optional<std::string>> tokens;
  std::vector<TokenKind> kinds;
  // Every id below the largest must name a token, so no id reaches the number of entries: a
  // larger one is refused before it sizes the tables.
  const Json* added_tokens = Member(root, "added_tokens");
  const int64_t entries =
      static_cast<int64_t>(vocab->size()) + (added_tokens != nullptr && added_tokens->is_array()
                                                 ? static_cast<int64_t>(added_tokens->size())
                                                 : 0);
  const auto place = [&](int64_t id, const std::string& text, TokenKind kind,
                         bool added) -> absl::Status {
    if (id < 0 || id >= std::min<int64_t>(entries, INT32_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(where), ": token '", text, "' has the id ", id, ", outside the ",
                       entries, " entries of the vocabulary and its added tokens"));
    }
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      kinds.resize(id + 1, TokenKind::kNormal);
    }
    if (tokens[id].has_value() && !(added && *tokens[id] == text)) {
      return absl::InvalidArgumentError(absl::StrCat(AbslView(where), ": id ", id, " is both '",
                                                     *tokens[id], "' and '", text, "'"));
    }
    tokens[id] = text;
    kinds[id] = kind;
    return absl::OkStatus();
  };
  for (const auto& [text, id] : vocab->items()) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(where), ": the id of token '", text, "' is not an integer"));
    }
    const std::string_view view = text;
    const bool is_byte =
        byte_fallback && view.size() == 6 && view.starts_with("<0x") && view.ends_with(">");
    PULSE_RETURN_IF_ERROR(
        place(id.get<int64_t>(), text, is_byte ? TokenKind::kByte : TokenKind::kNormal, false));
  }
  if (const Json* added = Member(root, "added_tokens")) {
    if (!added->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(where), ": added_tokens is not a list"));
    }
    for (const Json& token : *added) {
      const Json* id = Member(token, "id");
      PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> content,
                             StringMember(token, "content", where));
      PULSE_ASSIGN_OR_RETURN(const std::optional<bool> special,
                             BoolMember(token, "special", where));
      if (id == nullptr || !id->is_number_integer() || !content.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            AbslView(where), ": an added token without an integer \"id\" and a \"content\""));
      }
      PULSE_RETURN_IF_ERROR(
          place(id->get<int64_t>(), *content,
                special.value_or(false) ? TokenKind::kControl : TokenKind::kUserDefined, true));
    }
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id].has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(AbslView(where), ": token id ", id,
                                                     " is in neither the vocab nor added_tokens"));
    }
    vocabulary.tokens.push_back(*std::move(tokens[id]));
  }
  vocabulary.kinds = std::move(kinds);
  return absl::OkStatus();
}

int32_t FindId(const Vocabulary& vocabulary, std::string_view text) {
  for (size_t id = 0; id < vocabulary.tokens.size(); ++id) {
    if (vocabulary.tokens[id] == text) return static_cast<int32_t>(id);
  }
  return -1;
}

// bos/eos from a TemplateProcessing post-processor: a special token before or after $A.
absl::Status ReadPostProcessor(const Json& processor, std::string_view where,
                               Vocabulary& vocabulary) {
  const std::string type = TypeOf(processor);
  if (type == "Sequence") {
    if (const Json* steps = Member(processor, "processors");
        steps != nullptr && steps->is_array()) {
      for (const Json& step : *steps) {
        PULSE_RETURN_IF_ERROR(ReadPostProcessor(step, where, vocabulary));
      }
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") return absl::OkStatus();  // ByteLevel: offsets only
  const Json* single = Member(processor, "single");
  if (single == nullptr || !single->is_array() || single->empty()) return absl::OkStatus();
  const auto special_id = [&](const Json& item) -> absl::StatusOr<int32_t> {
    const Json* special = Member(item, "SpecialToken");
    if (special == nullptr) return -1;
    PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> name,
                           StringMember(*special, "id", where));
    const int32_t id = FindId(vocabulary, name.value_or(""));
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(AbslView(where), ": post-processor token '",
                                                     name.value_or(""),
                                                     "' is not in the vocabulary"));
    }
    return id;
  };
  PULSE_ASSIGN_OR_RETURN(const int32_t first, special_id(single->front()));
  if (first >= 0) {
    vocabulary.add_bos = true;
    vocabulary.bos_id = first;
  }
  if (single->size() > 1) {
    PULSE_ASSIGN_OR_RETURN(const int32_t last, special_id(single->back()));
    if (last >= 0) {
      vocabulary.add_eos = true;
      vocabulary.eos_id = last;
    }
  }
  return absl::OkStatus();
}

// A special token of tokenizer_config.json: a string or {"content": ...}; -1 when absent.
absl::StatusOr<int32_t> ConfigTokenId(const Json& config, std::string_view key,
                                      const Vocabulary& vocabulary, std::string_view where) {
  const Json* value = Member(config, key);
  if (value == nullptr) return -1;
  const Json* content = value->is_object() ? Member(*value, "content") : value;
  if (content == nullptr || !content->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        AbslView(where), ": \"", AbslView(key), "\" is neither a string nor {\"content\": ...}"));
  }
  const int32_t id = FindId(vocabulary, content->get<std::string>());
  if (id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(where), ": ", AbslView(key), " '",
                                                   content->get<std::string>(),
                                                   "' is not in the vocabulary"));
  }
  return id;
}

absl::Status ReadTokenizerConfig(const std::filesystem::path& directory, Vocabulary& vocabulary) {
  const std::filesystem::path path = directory / "tokenizer_config.json";
  if (std::filesystem::exists(path)) {
    PULSE_ASSIGN_OR_RETURN(const Json config, ReadJsonObject(path));
    const std::string where = path.string();
    PULSE_ASSIGN_OR_RETURN(const int32_t bos,
                           ConfigTokenId(config, "bos_token", vocabulary, where));
    PULSE_ASSIGN_OR_RETURN(const int32_t eos,
                           ConfigTokenId(config, "eos_token", vocabulary, where));
    PULSE_ASSIGN_OR_RETURN(const int32_t unk,
                           ConfigTokenId(config, "unk_token", vocabulary, where));
    if (bos >= 0) vocabulary.bos_id = bos;
    if (eos >= 0) vocabulary.eos_id = eos;
    if (unk >= 0) vocabulary.unk_id = unk;
    PULSE_ASSIGN_OR_RETURN(const std::optional<bool> add_bos,
                           BoolMember(config, "add_bos_token", where));
    PULSE_ASSIGN_OR_RETURN(const std::optional<bool> add_eos,
                           BoolMember(config, "add_eos_token", where));
    vocabulary.add_bos = add_bos.value_or(vocabulary.add_bos);
    vocabulary.add_eos = add_eos.value_or(vocabulary.add_eos);
    if (const Json* chat_template = Member(config, "chat_template")) {
      if (chat_template->is_string()) {
        vocabulary.chat_template = chat_template->get<std::string>();
      } else if (chat_template->is_array()) {  // named templates: the "default" one
        for (const Json& named : *chat_template) {
          PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> name,
                                 StringMember(named, "name", where));
          PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> text,
                                 StringMember(named, "template", where));
          if (name.value_or("") == "default") vocabulary.chat_template = text.value_or("");
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": chat_template is neither a string nor a list"));
      }
    }
  }
  const std::filesystem::path jinja = directory / "chat_template.jinja";
  if (vocabulary.chat_template.empty() && std::filesystem::exists(jinja)) {
    PULSE_ASSIGN_OR_RETURN(vocabulary.chat_template, ReadFile(jinja));
  }
  return absl::OkStatus();
}

absl::Status ReadGenerationConfig(const std::filesystem::path& directory, Vocabulary& vocabulary) {
  const std::filesystem::path path = directory / "generation_config.json";
  if (!std::filesystem::exists(path)) return absl::OkStatus();
  PULSE_ASSIGN_OR_RETURN(const Json config, ReadJsonObject(path));
  const Json* eos = Member(config, "eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  const Json list = eos->is_array() ? *eos : Json::array({*eos});
  for (const Json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= static_cast<int64_t>(vocabulary.tokens.size())) {
      return absl::InvalidArgumentError(absl::StrCat(path.string(), ": eos_token_id ", id.dump(),
                                                     " is not a token id of the vocabulary"));
    }
    vocabulary.end_of_generation_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  if (vocabulary.eos_id < 0 && !vocabulary.end_of_generation_ids.empty()) {
    vocabulary.eos_id = vocabulary.end_of_generation_ids.front();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Vocabulary> VocabularyFromHfDirectory(const std::string& directory) {
  const std::filesystem::path path = std::filesystem::path(directory) / "tokenizer.json";
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat(directory, " has no tokenizer.json"));
  }
  const std::string where = path.string();
  PULSE_ASSIGN_OR_RETURN(const Json root, ReadJsonObject(path));
  const Json* model = Member(root, "model");
  if (model == nullptr || !model->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no \"model\" object"));
  }
  const std::string model_type = TypeOf(*model);
  if (model_type != "BPE" && !(model_type.empty() && Member(*model, "merges") != nullptr)) {
    return Unsupported(where, "tokenizer model", model_type.empty() ? "(no type)" : model_type);
  }
  PULSE_RETURN_IF_ERROR(CheckUnsupportedModelOptions(*model, where));
  PULSE_ASSIGN_OR_RETURN(const std::optional<bool> byte_fallback,
                         BoolMember(*model, "byte_fallback", where));
  PULSE_ASSIGN_OR_RETURN(const std::optional<bool> ignore_merges,
                         BoolMember(*model, "ignore_merges", where));

  TextPipeline pipeline;
  if (const Json* normalizer = Member(root, "normalizer")) {
    PULSE_RETURN_IF_ERROR(AddNormalizer(*normalizer, where, pipeline));
  }
  if (const Json* pre_tokenizer = Member(root, "pre_tokenizer")) {
    PULSE_RETURN_IF_ERROR(AddPreTokenizer(*pre_tokenizer, where, pipeline));
  }
  Vocabulary vocabulary;
  if (pipeline.byte_level && !pipeline.spaces_to_symbols) {
    vocabulary.model = VocabularyModel::kByteLevelBpe;
    vocabulary.pre_tokenizer_name = PreTokenizerNameOf(pipeline.regexes);
    vocabulary.pre_tokenizer_regexes = std::move(pipeline.regexes);
  } else if (pipeline.spaces_to_symbols && !pipeline.byte_level && pipeline.regexes.empty()) {
    vocabulary.model = VocabularyModel::kSentencePiece;
    vocabulary.space_prefix = pipeline.space_prefix;
  } else {
    return absl::UnimplementedError(
        absl::StrCat(where,
                     ": unsupported tokenizer shape: neither byte-level BPE (a ByteLevel "
                     "pre-tokenizer, optionally after Split/Digits) nor SentencePiece-style BPE "
                     "(spaces replaced by U+2581, no other splitting)"));
  }
  vocabulary.ignore_merges = ignore_merges.value_or(false);
  PULSE_RETURN_IF_ERROR(ReadTokens(root, *model, byte_fallback.value_or(false), where, vocabulary));
  PULSE_ASSIGN_OR_RETURN(vocabulary.merges, ReadMerges(*model, where));
  PULSE_ASSIGN_OR_RETURN(const std::optional<std::string> unk,
                         StringMember(*model, "unk_token", where));
  if (unk.has_value()) {
    vocabulary.unk_id = FindId(vocabulary, *unk);
    if (vocabulary.unk_id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unk_token '", *unk, "' is not in the vocabulary"));
    }
    vocabulary.kinds[vocabulary.unk_id] = TokenKind::kUnknown;
  }
  if (const Json* processor = Member(root, "post_processor")) {
    PULSE_RETURN_IF_ERROR(ReadPostProcessor(*processor, where, vocabulary));
  }
  PULSE_RETURN_IF_ERROR(ReadTokenizerConfig(directory, vocabulary));
  PULSE_RETURN_IF_ERROR(ReadGenerationConfig(directory, vocabulary));
  PULSE_RETURN_IF_ERROR(ValidateVocabulary(vocabulary, where));
  AddConventionalEndOfGenerationIds(vocabulary);
  return vocabulary;
}

}  // namespace pulse
