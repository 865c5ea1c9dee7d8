// A Hugging Face config.json as any text.
#include "core/format/hf_config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)pulse::ParseHfConfig(pulse::fuzz::Text(data, size));
  return 0;
}
