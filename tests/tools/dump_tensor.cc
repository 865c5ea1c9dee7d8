// pulse-dump-tensor: writes one tensor as little-endian fp32, for the Python tests.
//
//   pulse-dump-tensor FILE.gguf GGUF_TENSOR_NAME OUT.f32   raw GGUF tensor through Dequantize
//                                                          (llama.cpp's row order, ggml's ne)
//   pulse-dump-tensor --hf PATH HF_TENSOR_NAME OUT.f32     through TensorSource::Read (any
//                                                          format; Hugging Face layout)
//
// Prints the shape (outermost first) and the stored type on stdout.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/format/dequant.h"
#include "core/format/gguf_reader.h"
#include "core/model/tensor_source.h"

namespace pulse {
namespace {

absl::Status WriteFloats(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out.good()) return absl::InternalError("cannot write '" + path + "'");
  return absl::OkStatus();
}

absl::Status DumpGguf(const std::string& path, const std::string& name, const std::string& out) {
  PULSE_ASSIGN_OR_RETURN(const GgufFile file, GgufFile::Open(path));
  const GgufTensorInfo* info = file.FindTensor(name);
  if (info == nullptr) return absl::NotFoundError("no tensor '" + name + "' in '" + path + "'");
  std::vector<float> values(info->elements);
  PULSE_RETURN_IF_ERROR(Dequantize(info->type, file.TensorData(*info), values));
  std::cout << absl::StrJoin(info->ne.rbegin(), info->ne.rend(), ",") << " "
            << GgmlTypeName(info->type) << "\n";
  return WriteFloats(out, values);
}

absl::Status DumpHf(const std::string& path, const std::string& name, const std::string& out) {
  PULSE_ASSIGN_OR_RETURN(const std::unique_ptr<TensorSource> source, OpenTensorSource(path));
  for (const TensorInfo& tensor : source->tensors()) {
    if (tensor.name != name) continue;
    std::vector<float> values(tensor.elements());
    PULSE_RETURN_IF_ERROR(source->Read(name, values));
    std::cout << absl::StrJoin(tensor.shape, ",") << " " << tensor.stored_type << "\n";
    return WriteFloats(out, values);
  }
  return absl::NotFoundError("no tensor '" + name + "' in '" + path + "'");
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::Status status;
  if (args.size() == 4 && args[0] == "--hf") {
    status = pulse::DumpHf(args[1], args[2], args[3]);
  } else if (args.size() == 3) {
    status = pulse::DumpGguf(args[0], args[1], args[2]);
  } else {
    std::cerr << "usage: pulse-dump-tensor FILE.gguf GGUF_TENSOR_NAME OUT.f32\n"
                 "       pulse-dump-tensor --hf PATH TENSOR_NAME OUT.f32\n";
    return 2;
  }
  if (!status.ok()) {
    std::cerr << "pulse-dump-tensor: " << status << "\n";
    return 1;
  }
  return 0;
}
