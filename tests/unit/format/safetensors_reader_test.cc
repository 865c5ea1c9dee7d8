#include "core/format/safetensors_reader.h"

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/format/gguf_writer.h"

namespace pulse {
namespace {

using ::pulse::testing::ByteWriter;
using ::pulse::testing::WriteTempFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using Json = nlohmann::json;

std::span<const std::byte> Bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// A file of two tensors: "b" f32 [2] = {1, 2} and "a" bf16 [1, 3], after a __metadata__ entry.
std::vector<std::byte> SampleFile() {
  const Json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
      {"a", {{"dtype", "BF16"}, {"shape", {1, 3}}, {"data_offsets", {8, 14}}}},
  };
  const std::string text = header.dump();
  ByteWriter out;
  out.Put<uint64_t>(text.size());
  out.PutBytes(Bytes(text));
  out.Put(1.0f);
  out.Put(2.0f);
  for (const uint16_t bits : {0x3F80, 0x4000, 0x4040}) out.Put(bits);
  return out.bytes();
}

TEST(SafetensorsFileTest, ReadsTheHeaderAndPlacesTheData) {
  const std::string path = WriteTempFile("sample.safetensors", SampleFile());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path(), path);
  ASSERT_EQ(file->tensors().size(), 2u);

  const SafetensorsTensorInfo* b = file->FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, GgmlType::kF32);
  EXPECT_EQ(b->type_name, "f32");
  EXPECT_THAT(b->shape, ElementsAre(2));
  float values[2];
  ASSERT_EQ(file->TensorData(*b).size(), sizeof(values));
  std::memcpy(values, file->TensorData(*b).data(), sizeof(values));
  EXPECT_THAT(values, ElementsAre(1.0f, 2.0f));

  const SafetensorsTensorInfo* a = file->FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, GgmlType::kBF16);
  EXPECT_EQ(a->type_name, "bf16");
  EXPECT_THAT(a->shape, ElementsAre(1, 3));
  EXPECT_EQ(a->begin, 8u);
  EXPECT_EQ(a->bytes, 6u);
  EXPECT_EQ(file->FindTensor("__metadata__"), nullptr);
  EXPECT_EQ(file->FindTensor("c"), nullptr);
}

TEST(SafetensorsFileTest, RejectsDataOutsideTheFile) {
  std::vector<std::byte> bytes = SampleFile();
  bytes.resize(bytes.size() - 2);  // "a" now ends past the data
  const absl::Status status =
      SafetensorsFile::Open(WriteTempFile("short.safetensors", bytes)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'a': data_offsets [8, 14] lie outside"));
}

TEST(SafetensorsIndexTest, WeightMapByTensorName) {
  const std::string path = WriteTempFile(
      "model.safetensors.index.json",
      Bytes(R"({"metadata": {}, "weight_map": {"y": "two.safetensors", "x": "one.safetensors"}})"));
  absl::StatusOr<std::map<std::string, std::string>> index = ReadSafetensorsIndex(path);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_THAT(*index, ElementsAre(Pair("x", "one.safetensors"), Pair("y", "two.safetensors")));
}

TEST(SafetensorsIndexTest, RejectsAShardOutsideTheDirectory) {
  const std::string path =
      WriteTempFile("bad.index.json", Bytes(R"({"weight_map": {"x": "../one.safetensors"}})"));
  const absl::Status status = ReadSafetensorsIndex(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("weight_map['x'] = \"../one.safetensors\" is not a file"));
}

// A header nested far deeper than any real one (here in a tensor's dtype) is refused before it
// is parsed: walking, printing or freeing such a value would exhaust the stack.
TEST(SafetensorsFileTest, RefusesAHeaderNestedTooDeep) {
  const std::string deep = std::string(500'000, '[') + std::string(500'000, ']');
  const std::string text =
      R"({"a": {"dtype": )" + deep + R"(, "shape": [1], "data_offsets": [0, 4]}})";
  ByteWriter out;
  out.Put<uint64_t>(text.size());
  out.PutBytes(Bytes(text));
  out.Put(1.0f);
  const absl::Status status =
      SafetensorsFile::Open(WriteTempFile("deep.safetensors", out.bytes())).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("JSON nested more than"));
  const std::string index =
      WriteTempFile("deep.index.json", Bytes(R"({"weight_map": {"x": )" + deep + "}}"));
  EXPECT_EQ(ReadSafetensorsIndex(index).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pulse
