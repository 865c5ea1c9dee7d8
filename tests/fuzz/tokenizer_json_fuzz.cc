// A Hugging Face tokenizer directory whose tokenizer.json is any bytes; a tokenizer that loads
// encodes and decodes a fixed text.
#include <filesystem>

#include "core/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = pulse::fuzz::WriteInput("tokenizer.json", {data, size});
  absl::StatusOr<std::unique_ptr<pulse::Tokenizer>> tokenizer =
      pulse::Tokenizer::FromHfDirectory(std::filesystem::path(path).parent_path().string());
  if (!tokenizer.ok()) return 0;
  const std::vector<int32_t> ids = (*tokenizer)->Encode("Hello, world!\n  123 ∑ <|end|>", {});
  (void)(*tokenizer)->Decode(ids, {});
  return 0;
}
