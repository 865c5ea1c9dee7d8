// A validating reader of Hugging Face .safetensors files over a memory mapping, and of the
// model.safetensors.index.json that names a sharded model's files.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data; offsets count from the end of the header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/base/mapped_file.h"
#include "core/base/status.h"
#include "core/format/dequant.h"

namespace pulse {

struct SafetensorsTensorInfo {
  std::string name;
  std::vector<int64_t> shape;      // outermost first
  GgmlType type = GgmlType::kF32;  // F32, F16 or BF16, which ggml decodes the same way
  std::string type_name;           // "f32", "f16", "bf16"
  uint64_t begin = 0;              // from the start of the data section
  uint64_t bytes = 0;
};

class SafetensorsFile {
 public:
  // Maps `path` and checks its header: every tensor's dtype is supported, its shape does not
  // overflow, and its data_offsets lie inside the file and hold exactly its values.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  const std::string& path() const { return file_.path(); }
  // Tensors in the order the parsed header iterates them (the "__metadata__" entry left out).
  std::span<const SafetensorsTensorInfo> tensors() const { return tensors_; }
  const SafetensorsTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's encoded bytes (exactly info.bytes), inside the mapping.
  std::span<const std::byte> TensorData(const SafetensorsTensorInfo& info) const;

 private:
  explicit SafetensorsFile(MappedFile file) : file_(std::move(file)) {}

  MappedFile file_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

// The weight_map of a model.safetensors.index.json: tensor name -> shard file name, by tensor
// name. Every shard is a bare file name (in the index's directory); InvalidArgument otherwise.
absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsIndex(
    const std::string& index_path);

}  // namespace pulse
