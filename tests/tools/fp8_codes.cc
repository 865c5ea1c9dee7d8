// pulse-fp8-codes: the library's fp8 E4M3 conversions (core/backend/fp8.h), for the Python test
// that checks them against NumPy's (ml_dtypes) reference.
//
//   pulse-fp8-codes encode IN.f32 OUT.u8   each little-endian fp32 value's code
//   pulse-fp8-codes decode OUT.f32         the value of each of the 256 codes, in code order
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/backend/fp8.h"

namespace {

int Usage() {
  std::fprintf(stderr, "usage: pulse-fp8-codes encode IN.f32 OUT.u8 | decode OUT.f32\n");
  return 2;
}

bool Write(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return out.good();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string verb = argc > 1 ? argv[1] : "";
  if (verb == "decode" && argc == 3) {
    std::vector<float> values(256);
    for (int code = 0; code < 256; ++code) {
      values[static_cast<size_t>(code)] = pulse::Fp8E4m3ToF32(static_cast<uint8_t>(code));
    }
    return Write(argv[2], values.data(), values.size() * sizeof(float)) ? 0 : 1;
  }
  if (verb != "encode" || argc != 4) return Usage();
  std::ifstream in(argv[2], std::ios::binary | std::ios::ate);
  const std::streamoff bytes = in.tellg();
  std::vector<float> values(bytes > 0 ? static_cast<size_t>(bytes) / sizeof(float) : 0);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()),
          static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!in || bytes < 0 || static_cast<size_t>(bytes) % sizeof(float) != 0) {
    std::fprintf(stderr, "pulse-fp8-codes: cannot read whole fp32 values from '%s'\n", argv[2]);
    return 1;
  }
  std::vector<uint8_t> codes(values.size());
  for (size_t i = 0; i < values.size(); ++i) codes[i] = pulse::F32ToFp8E4m3(values[i]);
  return Write(argv[3], codes.data(), codes.size()) ? 0 : 1;
}
