// The GGUF reader over any bytes: the header, metadata and tensor table, every value read back
// as text, and the tokenizer built from the metadata.
#include "core/format/gguf_reader.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = pulse::fuzz::WriteInput("model.gguf", {data, size});
  absl::StatusOr<pulse::GgufFile> file = pulse::GgufFile::Open(path);
  if (!file.ok()) return 0;
  for (const pulse::GgufMetadataEntry& entry : file->metadata()) {
    (void)file->RenderValue(entry);
  }
  for (const pulse::GgufTensorInfo& tensor : file->tensors()) (void)file->TensorData(tensor);
  absl::StatusOr<std::unique_ptr<pulse::Tokenizer>> tokenizer = pulse::Tokenizer::FromGguf(*file);
  if (tokenizer.ok()) {
    const std::vector<int32_t> ids = (*tokenizer)->Encode("Hello, world! 123 ∑", {});
    (void)(*tokenizer)->Decode(ids, {});
  }
  return 0;
}
