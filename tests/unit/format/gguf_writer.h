// Test-only writer of GGUF files (little-endian, v2 or v3), written independently of the reader
// so that tests check the reader against the format, and able to produce corrupt files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/format/dequant.h"
#include "core/format/gguf_reader.h"

namespace pulse::testing {

// Appends little-endian values.
class ByteWriter {
 public:
  template <typename T>
  void Put(T value) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
  }
  void PutString(std::string_view text) {
    Put<uint64_t>(text.size());
    PutBytes(std::as_bytes(std::span(text.data(), text.size())));
  }
  void PutBytes(std::span<const std::byte> data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
  }
  void PadTo(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(std::byte{0});
  }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  void AddString(std::string_view key, std::string_view value);
  void AddU32(std::string_view key, uint32_t value);
  void AddI32(std::string_view key, int32_t value);
  void AddU64(std::string_view key, uint64_t value);
  void AddF32(std::string_view key, float value);
  void AddF64(std::string_view key, double value);
  void AddBool(std::string_view key, bool value);
  void AddStringArray(std::string_view key, const std::vector<std::string>& values);
  void AddI32Array(std::string_view key, const std::vector<int32_t>& values);
  void AddF32Array(std::string_view key, const std::vector<float>& values);
  // A key whose value (after the type) is `payload` verbatim.
  void AddRaw(std::string_view key, GgufValueType type, std::span<const std::byte> payload);
  // general.alignment, written as uint32.
  void SetAlignment(uint32_t alignment);

  // A tensor with its encoded bytes; ne in ggml order (ne[0] contiguous).
  void AddTensor(std::string_view name, std::vector<int64_t> ne, GgmlType type,
                 std::vector<std::byte> data);
  void AddF32Tensor(std::string_view name, std::vector<int64_t> ne, std::span<const float> values);

  // The whole file. Offsets are assigned in order, each aligned; no padding after the last.
  std::vector<std::byte> Bytes() const;
  // Size of the header and tensor infos (before the data section's padding).
  size_t HeaderBytes() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::vector<std::byte> data;
  };
  ByteWriter& NewKey(std::string_view key, GgufValueType type);
  void WriteHeader(ByteWriter& out) const;

  uint32_t version_;
  uint32_t alignment_ = 32;
  uint64_t kv_count_ = 0;
  ByteWriter metadata_;
  std::vector<Tensor> tensors_;
};

// A path unique to the running test, in a directory of this process that is removed at exit.
std::string TempPath(std::string_view name);
// Writes `bytes` to TempPath(name) and returns the path.
std::string WriteTempFile(std::string_view name, std::span<const std::byte> bytes);

// Bytes of float values, for F32 tensors.
std::vector<std::byte> F32Bytes(std::span<const float> values);

}  // namespace pulse::testing
