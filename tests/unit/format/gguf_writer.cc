#include "tests/unit/format/gguf_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pulse::testing {

ByteWriter& GgufWriter::NewKey(std::string_view key, GgufValueType type) {
  ++kv_count_;
  metadata_.PutString(key);
  metadata_.Put<uint32_t>(static_cast<uint32_t>(type));
  return metadata_;
}

void GgufWriter::AddString(std::string_view key, std::string_view value) {
  NewKey(key, GgufValueType::kString).PutString(value);
}
void GgufWriter::AddU32(std::string_view key, uint32_t value) {
  NewKey(key, GgufValueType::kUint32).Put(value);
}
void GgufWriter::AddI32(std::string_view key, int32_t value) {
  NewKey(key, GgufValueType::kInt32).Put(value);
}
void GgufWriter::AddU64(std::string_view key, uint64_t value) {
  NewKey(key, GgufValueType::kUint64).Put(value);
}
void GgufWriter::AddF32(std::string_view key, float value) {
  NewKey(key, GgufValueType::kFloat32).Put(value);
}
void GgufWriter::AddF64(std::string_view key, double value) {
  NewKey(key, GgufValueType::kFloat64).Put(value);
}
void GgufWriter::AddBool(std::string_view key, bool value) {
  NewKey(key, GgufValueType::kBool).Put<uint8_t>(value ? 1 : 0);
}
void GgufWriter::AddStringArray(std::string_view key, const std::vector<std::string>& values) {
  ByteWriter& out = NewKey(key, GgufValueType::kArray);
  out.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kString));
  out.Put<uint64_t>(values.size());
  for (const std::string& value : values) out.PutString(value);
}
void GgufWriter::AddI32Array(std::string_view key, const std::vector<int32_t>& values) {
  ByteWriter& out = NewKey(key, GgufValueType::kArray);
  out.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kInt32));
  out.Put<uint64_t>(values.size());
  for (const int32_t value : values) out.Put(value);
}
void GgufWriter::AddF32Array(std::string_view key, const std::vector<float>& values) {
  ByteWriter& out = NewKey(key, GgufValueType::kArray);
  out.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kFloat32));
  out.Put<uint64_t>(values.size());
  for (const float value : values) out.Put(value);
}
void GgufWriter::AddRaw(std::string_view key, GgufValueType type,
                        std::span<const std::byte> payload) {
  NewKey(key, type).PutBytes(payload);
}
void GgufWriter::SetAlignment(uint32_t alignment) {
  alignment_ = alignment;
  AddU32("general.alignment", alignment);
}

void GgufWriter::AddTensor(std::string_view name, std::vector<int64_t> ne, GgmlType type,
                           std::vector<std::byte> data) {
  tensors_.push_back({std::string(name), std::move(ne), type, std::move(data)});
}

void GgufWriter::AddF32Tensor(std::string_view name, std::vector<int64_t> ne,
                              std::span<const float> values) {
  AddTensor(name, std::move(ne), GgmlType::kF32, F32Bytes(values));
}

void GgufWriter::WriteHeader(ByteWriter& out) const {
  out.PutBytes(std::as_bytes(std::span("GGUF", 4)));
  out.Put<uint32_t>(version_);
  out.Put<uint64_t>(tensors_.size());
  out.Put<uint64_t>(kv_count_);
  ByteWriter metadata = metadata_;
  out.PutBytes(metadata.bytes());
  uint64_t offset = 0;
  for (const Tensor& tensor : tensors_) {
    out.PutString(tensor.name);
    out.Put<uint32_t>(static_cast<uint32_t>(tensor.ne.size()));
    for (const int64_t ne : tensor.ne) out.Put<uint64_t>(ne);
    out.Put<uint32_t>(static_cast<uint32_t>(tensor.type));
    out.Put<uint64_t>(offset);
    offset += (tensor.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
}

size_t GgufWriter::HeaderBytes() const {
  ByteWriter out;
  WriteHeader(out);
  return out.bytes().size();
}

std::vector<std::byte> GgufWriter::Bytes() const {
  ByteWriter out;
  WriteHeader(out);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.PadTo(alignment_);
    out.PutBytes(tensors_[i].data);
  }
  return std::move(out.bytes());
}

namespace {

// One directory per test process, removed when the process exits.
class ProcessTempDir {
 public:
  ProcessTempDir()
      : path_(std::filesystem::path(::testing::TempDir()) /
              absl::StrCat("pulse-model-test-", ::getpid())) {
    std::filesystem::create_directories(path_);
  }
  ~ProcessTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace

std::string TempPath(std::string_view name) {
  static const ProcessTempDir dir;
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string unique = absl::StrCat(test->test_suite_name(), ".", test->name(), ".");
  absl::c_replace(unique, '/', '_');
  return (dir.path() / (unique + std::string(name))).string();
}

std::string WriteTempFile(std::string_view name, std::span<const std::byte> bytes) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
  return path;
}

std::vector<std::byte> F32Bytes(std::span<const float> values) {
  const auto bytes = std::as_bytes(values);
  return {bytes.begin(), bytes.end()};
}

}  // namespace pulse::testing
