// A validating reader of GGUF v2/v3 files (the llama.cpp model format) over a memory mapping.
//
// Open() checks the whole header up front: every count and length is bounded by the file size
// before anything is allocated, and every tensor's data lies inside the file, aligned. Metadata
// values stay in the mapping (arrays are decoded on Get*), so opening a model is fast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/base/mapped_file.h"
#include "core/base/status.h"
#include "core/format/dequant.h"

namespace pulse {

// GGUF metadata value types, numbered as in the GGUF specification.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", "array"...
std::string_view GgufValueTypeName(GgufValueType type);

// One metadata key/value. Views point into the file's mapping (valid while the GgufFile lives).
struct GgufMetadataEntry {
  std::string_view key;
  GgufValueType type = GgufValueType::kUint8;
  // For arrays: the element type and the number of elements; otherwise kUint8 and 1.
  GgufValueType element_type = GgufValueType::kUint8;
  uint64_t count = 1;
  // The encoded value: for scalars its bytes, for strings the length prefix and the bytes, for
  // arrays the elements after the array header.
  std::span<const std::byte> payload;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous (innermost) dimension
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  int64_t elements = 0;
  int64_t bytes = 0;
};

class GgufFile {
 public:
  static absl::StatusOr<GgufFile> Open(const std::string& path);

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // --- metadata ---------------------------------------------------------------------------
  // Entries in file order.
  std::span<const GgufMetadataEntry> metadata() const { return entries_; }
  const GgufMetadataEntry* FindMetadata(std::string_view key) const;
  bool Has(std::string_view key) const { return FindMetadata(key) != nullptr; }

  // Each getter gives InvalidArgument naming the key when it is absent (ask Has() first for an
  // optional key: a missing one the model needs makes the file an invalid model), and naming the
  // key and both types when the stored type does not fit.
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  // Any integer type; uint64 values above INT64_MAX are rejected.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  // float32 or float64.
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  // Arrays of any integer type (uint64 above INT64_MAX rejected) or of bool.
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  // Arrays of float32 (or float64, rounded to float).
  absl::StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;

  // Text of a value: scalars and strings in full, arrays of up to 8 scalars or strings as
  // "[1, 2, 3]", longer or nested ones as "[array of N string]".
  std::string RenderValue(const GgufMetadataEntry& entry) const;

  // --- tensors ----------------------------------------------------------------------------
  std::span<const GgufTensorInfo> tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's encoded bytes (exactly info.bytes), inside the mapping.
  std::span<const std::byte> TensorData(const GgufTensorInfo& info) const;

 private:
  class Parser;

  explicit GgufFile(MappedFile file) : file_(std::move(file)) {}

  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;  // start of the data section in the file
  std::vector<GgufMetadataEntry> entries_;
  absl::flat_hash_map<std::string_view, size_t> entry_index_;  // keys view the mapping
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string_view, size_t> tensor_index_;  // names view the mapping
};

}  // namespace pulse
