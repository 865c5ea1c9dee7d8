// The safetensors readers over any bytes: the first byte chooses a shard (header and tensor
// table) or an index (model.safetensors.index.json).
#include "core/format/safetensors_reader.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    absl::StatusOr<pulse::SafetensorsFile> file =
        pulse::SafetensorsFile::Open(pulse::fuzz::WriteInput("model.safetensors", rest));
    if (!file.ok()) return 0;
    for (const auto& tensor : file->tensors()) (void)file->TensorData(tensor);
  } else {
    (void)pulse::ReadSafetensorsIndex(
        pulse::fuzz::WriteInput("model.safetensors.index.json", rest));
  }
  return 0;
}
