// pulse-tokenize: encodes texts with the library's tokenizer, for the Python comparisons with
// Hugging Face tokenizers.
//
//   pulse-tokenize (--gguf FILE | --hf-dir DIR) [--info]
//                  [--text-file F | --hex-lines F] [--ids-out F] [--decoded-out F]
//                  [--no-add-special] [--no-parse-special] [--render-special] [--time]
//
// --text-file encodes the whole file as one text; --hex-lines encodes each line of F (the text
// in hexadecimal, so that any bytes fit) as its own text. Ids go to --ids-out (default stdout),
// one line of space-separated ids a text; --decoded-out gets Decode(ids) of each, in
// hexadecimal, one line a text. --info prints the tokenizer's properties as JSON on stdout.
// --time prints the encoding time of all texts on stderr ("encode_ms=12.3").
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "core/format/gguf_reader.h"
#include "core/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

constexpr std::string_view kUsage =
    "usage: pulse-tokenize (--gguf FILE | --hf-dir DIR) [--info] [--text-file F | --hex-lines F]\n"
    "         [--ids-out F] [--decoded-out F] [--no-add-special] [--no-parse-special]\n"
    "         [--render-special] [--time]";

struct Args {
  std::string gguf;
  std::string hf_dir;
  std::string text_file;
  std::string hex_lines;
  std::string ids_out;
  std::string decoded_out;
  bool info = false;
  bool time = false;
  EncodeOptions encode;
  DecodeOptions decode;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    std::string* value = nullptr;
    if (flag == "--gguf") value = &args.gguf;
    if (flag == "--hf-dir") value = &args.hf_dir;
    if (flag == "--text-file") value = &args.text_file;
    if (flag == "--hex-lines") value = &args.hex_lines;
    if (flag == "--ids-out") value = &args.ids_out;
    if (flag == "--decoded-out") value = &args.decoded_out;
    if (value != nullptr) {
      if (++i == argc) return absl::InvalidArgumentError(std::string(flag) + " needs a value");
      *value = argv[i];
    } else if (flag == "--info") {
      args.info = true;
    } else if (flag == "--time") {
      args.time = true;
    } else if (flag == "--no-add-special") {
      args.encode.add_special = false;
    } else if (flag == "--no-parse-special") {
      args.encode.parse_special = false;
    } else if (flag == "--render-special") {
      args.decode.render_special = true;
    } else {
      return absl::InvalidArgumentError("unknown argument '" + std::string(flag) + "'");
    }
  }
  if (args.gguf.empty() == args.hf_dir.empty()) {
    return absl::InvalidArgumentError("give exactly one of --gguf and --hf-dir");
  }
  if (!args.text_file.empty() && !args.hex_lines.empty()) {
    return absl::InvalidArgumentError("give at most one of --text-file and --hex-lines");
  }
  return args;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open '" + path + "'");
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

bool IsHex(std::string_view line) {
  if (line.size() % 2 != 0) return false;
  for (const char c : line) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> ReadTexts(const Args& args) {
  if (!args.text_file.empty()) {
    PULSE_ASSIGN_OR_RETURN(std::string text, ReadFile(args.text_file));
    return std::vector<std::string>{std::move(text)};
  }
  if (args.hex_lines.empty()) return std::vector<std::string>();
  PULSE_ASSIGN_OR_RETURN(const std::string contents, ReadFile(args.hex_lines));
  std::vector<std::string> texts;
  std::istringstream lines(contents);
  std::string line;
  while (std::getline(lines, line)) {
    if (!IsHex(line)) {
      return absl::InvalidArgumentError("line " + std::to_string(texts.size() + 1) + " of '" +
                                        args.hex_lines + "' is not hexadecimal");
    }
    texts.push_back(absl::HexStringToBytes(line));
  }
  return texts;
}

std::string InfoJson(const Tokenizer& tokenizer) {
  const std::span<const int32_t> eog = tokenizer.end_of_generation_ids();
  const nlohmann::json info = {
      {"model", std::string(tokenizer.model_name())},
      {"pre_tokenizer", std::string(tokenizer.pre_tokenizer_name())},
      {"vocab_size", tokenizer.vocab_size()},
      {"bos_id", tokenizer.bos_id()},
      {"eos_id", tokenizer.eos_id()},
      {"end_of_generation_ids", std::vector<int32_t>(eog.begin(), eog.end())},
      {"add_bos", tokenizer.add_bos()},
      {"add_space_prefix", tokenizer.add_space_prefix()},
      {"chat_template_bytes", tokenizer.chat_template().size()},
  };
  return info.dump();
}

absl::Status WriteLines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream file;
  if (!path.empty()) {
    file.open(path, std::ios::binary | std::ios::trunc);
    if (!file) return absl::InternalError("cannot write '" + path + "'");
  }
  std::ostream& out = path.empty() ? std::cout : file;
  for (const std::string& line : lines) out << line << '\n';
  out.flush();
  if (!out) return absl::InternalError("cannot write '" + path + "'");
  return absl::OkStatus();
}

absl::Status Run(const Args& args) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (!args.gguf.empty()) {
    PULSE_ASSIGN_OR_RETURN(const GgufFile gguf, GgufFile::Open(args.gguf));
    PULSE_ASSIGN_OR_RETURN(tokenizer, Tokenizer::FromGguf(gguf));
  } else {
    PULSE_ASSIGN_OR_RETURN(tokenizer, Tokenizer::FromHfDirectory(args.hf_dir));
  }
  if (args.info) std::cout << InfoJson(*tokenizer) << "\n";
  PULSE_ASSIGN_OR_RETURN(const std::vector<std::string> texts, ReadTexts(args));
  if (texts.empty()) return absl::OkStatus();

  std::vector<std::vector<int32_t>> encoded;
  encoded.reserve(texts.size());
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& text : texts) encoded.push_back(tokenizer->Encode(text, args.encode));
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start;
  if (args.time) std::fprintf(stderr, "encode_ms=%.3f\n", elapsed.count());

  std::vector<std::string> id_lines;
  id_lines.reserve(encoded.size());
  for (const std::vector<int32_t>& ids : encoded) id_lines.push_back(absl::StrJoin(ids, " "));
  PULSE_RETURN_IF_ERROR(WriteLines(args.ids_out, id_lines));
  if (!args.decoded_out.empty()) {
    std::vector<std::string> decoded;
    decoded.reserve(encoded.size());
    for (const std::vector<int32_t>& ids : encoded) {
      decoded.push_back(absl::BytesToHexString(tokenizer->Decode(ids, args.decode)));
    }
    PULSE_RETURN_IF_ERROR(WriteLines(args.decoded_out, decoded));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-tokenize", pulse::kUsage, pulse::ParseArgs(argc, argv), &pulse::Run);
}
