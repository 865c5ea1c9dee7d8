// Encoding any text with a real vocabulary (SmolLM2's byte-level BPE, from the repository's
// asset), then decoding it whole and streaming it token by token: the stream's pieces must add
// up to the whole decode (TextStream's contract), whatever the bytes.
#include <cstdio>
#include <cstdlib>

#include "core/format/gguf_reader.h"
#include "core/text/text_stream.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

const pulse::Tokenizer& SmolLm2Tokenizer() {
  static const std::unique_ptr<pulse::Tokenizer> tokenizer = [] {
    const std::string path =
        pulse::fuzz::SourcePath(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    absl::StatusOr<pulse::GgufFile> file = pulse::GgufFile::Open(path);
    absl::StatusOr<std::unique_ptr<pulse::Tokenizer>> loaded =
        file.ok() ? pulse::Tokenizer::FromGguf(*file) : file.status();
    if (!loaded.ok()) {
      std::fprintf(stderr, "tokenize_fuzz needs %s (scripts/setup fetches it): %s\n", path.c_str(),
                   std::string(loaded.status().message()).c_str());
      std::exit(1);
    }
    return *std::move(loaded);
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const pulse::Tokenizer& tokenizer = SmolLm2Tokenizer();
  const pulse::EncodeOptions encode{.add_special = (data[0] & 1) != 0,
                                    .parse_special = (data[0] & 2) != 0};
  const pulse::DecodeOptions decode{.render_special = (data[0] & 4) != 0};
  const std::vector<int32_t> ids = tokenizer.Encode(pulse::fuzz::Text(data + 1, size - 1), encode);
  const std::string whole = tokenizer.Decode(ids, decode);
  pulse::TextStream stream(tokenizer, {}, decode);
  std::string streamed;
  for (const int32_t id : ids) streamed += stream.Add(id).text;
  streamed += stream.Finish();
  if (streamed != whole) {
    std::fprintf(stderr, "streamed text (%zu bytes) differs from the whole decode (%zu bytes)\n",
                 streamed.size(), whole.size());
    std::abort();
  }
  return 0;
}
