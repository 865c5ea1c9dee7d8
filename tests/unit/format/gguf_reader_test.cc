#include "core/format/gguf_reader.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/format/gguf_writer.h"

namespace pulse {
namespace {

using ::pulse::testing::ByteWriter;
using ::pulse::testing::GgufWriter;
using ::pulse::testing::WriteTempFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

GgufWriter SampleWriter(uint32_t version) {
  GgufWriter writer(version);
  writer.AddString("general.architecture", "llama");
  writer.AddU32("llama.block_count", 30);
  writer.AddI32("signed", -7);
  writer.AddU64("big", uint64_t{1} << 40);
  writer.AddU64("too.big", std::numeric_limits<uint64_t>::max());
  writer.AddF32("llama.rope.freq_base", 100000.0f);
  writer.AddF64("double", 0.125);
  writer.AddBool("flag", true);
  writer.AddStringArray("tokens", {"a", "", "hello world"});
  writer.AddI32Array("types", {1, -2, 3});
  writer.AddF32Array("scores", {0.5f, -1.25f});
  const std::vector<float> weights = {1, 2, 3, 4, 5, 6};
  writer.AddF32Tensor("w", {3, 2}, weights);
  const std::vector<float> norm = {7, 8, 9};
  writer.AddF32Tensor("n", {3}, norm);
  return writer;
}

std::string Render(const GgufFile& file, std::string_view key) {
  return file.RenderValue(*file.FindMetadata(key));
}

class GgufReaderVersionTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufReaderVersionTest, ReadsEveryValueExactly) {
  const std::string path = WriteTempFile("sample.gguf", SampleWriter(GetParam()).Bytes());
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->version(), GetParam());
  EXPECT_EQ(*file->GetString("general.architecture"), "llama");
  EXPECT_EQ(*file->GetInt("llama.block_count"), 30);
  EXPECT_EQ(*file->GetInt("signed"), -7);
  EXPECT_EQ(*file->GetInt("big"), int64_t{1} << 40);
  EXPECT_THAT(file->GetInt("too.big").status().message(), HasSubstr("does not fit in int64"));
  EXPECT_EQ(*file->GetFloat("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(*file->GetFloat("double"), 0.125);
  EXPECT_TRUE(*file->GetBool("flag"));
  EXPECT_THAT(*file->GetStringArray("tokens"), ElementsAre("a", "", "hello world"));
  EXPECT_THAT(*file->GetIntArray("types"), ElementsAre(1, -2, 3));
  EXPECT_THAT(*file->GetFloatArray("scores"), ElementsAre(0.5f, -1.25f));
  EXPECT_TRUE(file->Has("flag"));
  EXPECT_FALSE(file->Has("nope"));
  EXPECT_EQ(file->GetString("nope").status().code(), absl::StatusCode::kInvalidArgument);

  ASSERT_EQ(file->metadata().size(), 11u);
  EXPECT_EQ(file->metadata()[0].key, "general.architecture");
  EXPECT_EQ(Render(*file, "general.architecture"), "llama");
  EXPECT_EQ(Render(*file, "signed"), "-7");
  EXPECT_EQ(Render(*file, "too.big"), "18446744073709551615");
  EXPECT_EQ(Render(*file, "flag"), "true");
  EXPECT_EQ(Render(*file, "tokens"), "[\"a\", \"\", \"hello world\"]");
  EXPECT_EQ(Render(*file, "types"), "[1, -2, 3]");

  ASSERT_EQ(file->tensors().size(), 2u);
  const GgufTensorInfo* w = file->FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->ne, ElementsAre(3, 2));
  EXPECT_EQ(w->type, GgmlType::kF32);
  EXPECT_EQ(w->elements, 6);
  EXPECT_EQ(w->bytes, 24);
  std::vector<float> values(6);
  ASSERT_TRUE(Dequantize(w->type, file->TensorData(*w), values).ok());
  EXPECT_THAT(values, ElementsAre(1, 2, 3, 4, 5, 6));
  const GgufTensorInfo* n = file->FindTensor("n");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->offset, 32u);
  EXPECT_EQ(file->FindTensor("missing"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Versions, GgufReaderVersionTest, ::testing::Values(2u, 3u));

TEST(GgufReaderTest, LongArraysRenderAsASummary) {
  GgufWriter writer;
  writer.AddI32Array("many", std::vector<int32_t>(9, 1));
  const std::string path = WriteTempFile("summary.gguf", writer.Bytes());
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(Render(*file, "many"), "[array of 9 int32]");
}

TEST(GgufReaderTest, WrongTypesNameKeyAndTypes) {
  const std::string path = WriteTempFile("types.gguf", SampleWriter(3).Bytes());
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::Status as_int = file->GetInt("general.architecture").status();
  EXPECT_EQ(as_int.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(as_int.message(), HasSubstr("'general.architecture' is string, expected an integer"));
  EXPECT_THAT(file->GetStringArray("types").status().message(),
              HasSubstr("is array of int32, expected array of string"));
  EXPECT_FALSE(file->GetString("llama.block_count").ok());
  EXPECT_FALSE(file->GetFloat("flag").ok());
  EXPECT_FALSE(file->GetBool("signed").ok());
  EXPECT_FALSE(file->GetFloatArray("tokens").ok());
}

TEST(GgufReaderTest, EveryTruncationIsAnError) {
  const std::vector<std::byte> bytes = SampleWriter(3).Bytes();
  const size_t header = SampleWriter(3).HeaderBytes();
  ASSERT_GT(bytes.size(), header);
  std::vector<size_t> cuts;
  for (size_t cut = 0; cut <= header + 8; ++cut) cuts.push_back(cut);
  for (size_t cut = header + 8; cut < bytes.size(); cut += 7) cuts.push_back(cut);
  cuts.push_back(bytes.size() - 1);
  for (const size_t cut : cuts) {
    const std::string path = WriteTempFile("truncated.gguf", std::span(bytes).first(cut));
    const absl::StatusOr<GgufFile> file = GgufFile::Open(path);
    ASSERT_FALSE(file.ok()) << "cut at " << cut << " of " << bytes.size();
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  }
}

// A file with the given header counts followed by `rest`.
std::vector<std::byte> RawFile(uint32_t version, uint64_t tensors, uint64_t kvs,
                               const std::vector<std::byte>& rest = {}) {
  ByteWriter out;
  out.PutBytes(std::as_bytes(std::span("GGUF", 4)));
  out.Put<uint32_t>(version);
  out.Put<uint64_t>(tensors);
  out.Put<uint64_t>(kvs);
  out.PutBytes(rest);
  out.bytes().resize(out.bytes().size() + 64);  // slack, so that only the counts are wrong
  return out.bytes();
}

absl::Status OpenBytes(const std::vector<std::byte>& bytes) {
  return GgufFile::Open(WriteTempFile("case.gguf", bytes)).status();
}

TEST(GgufReaderTest, RejectsBadMagicAndVersions) {
  std::vector<std::byte> bytes = SampleWriter(3).Bytes();
  bytes[0] = std::byte{'X'};
  EXPECT_THAT(OpenBytes(bytes).message(), HasSubstr("bad magic"));
  EXPECT_THAT(OpenBytes(RawFile(1, 0, 0)).message(), HasSubstr("unsupported version 1"));
  EXPECT_THAT(OpenBytes(RawFile(4, 0, 0)).message(), HasSubstr("unsupported version 4"));
  EXPECT_THAT(OpenBytes(RawFile(0x03000000, 0, 0)).message(), HasSubstr("big-endian"));
  EXPECT_FALSE(OpenBytes({}).ok());
}

TEST(GgufReaderTest, RejectsAbsurdCountsWithoutAllocating) {
  EXPECT_THAT(OpenBytes(RawFile(3, 0, uint64_t{1} << 60)).message(),
              HasSubstr("metadata count 1152921504606846976 does not fit"));
  EXPECT_THAT(OpenBytes(RawFile(3, uint64_t{1} << 60, 0)).message(),
              HasSubstr("tensor count 1152921504606846976 does not fit"));
  EXPECT_FALSE(OpenBytes(RawFile(3, ~uint64_t{0}, ~uint64_t{0})).ok());

  ByteWriter key;  // a key whose length is 2^60
  key.Put<uint64_t>(uint64_t{1} << 60);
  EXPECT_THAT(OpenBytes(RawFile(3, 0, 1, key.bytes())).message(),
              HasSubstr("string of 1152921504606846976 bytes"));

  ByteWriter array;  // an array of 2^60 uint32
  array.PutString("k");
  array.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kArray));
  array.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint32));
  array.Put<uint64_t>(uint64_t{1} << 60);
  EXPECT_THAT(OpenBytes(RawFile(3, 0, 1, array.bytes())).message(),
              HasSubstr("array of 1152921504606846976 uint32 does not fit"));

  ByteWriter strings;  // an array of 2^61 strings
  strings.PutString("k");
  strings.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kArray));
  strings.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kString));
  strings.Put<uint64_t>(uint64_t{1} << 61);
  EXPECT_THAT(OpenBytes(RawFile(3, 0, 1, strings.bytes())).message(), HasSubstr("does not fit"));

  ByteWriter element;  // an array whose one string is 2^60 long
  element.PutString("k");
  element.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kArray));
  element.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kString));
  element.Put<uint64_t>(1);
  element.Put<uint64_t>(uint64_t{1} << 60);
  EXPECT_THAT(OpenBytes(RawFile(3, 0, 1, element.bytes())).message(),
              HasSubstr("string of 1152921504606846976 bytes"));
}

TEST(GgufReaderTest, RejectsUnknownValueTypes) {
  ByteWriter kv;
  kv.PutString("k");
  kv.Put<uint32_t>(13);
  EXPECT_THAT(OpenBytes(RawFile(3, 0, 1, kv.bytes())).message(),
              HasSubstr("k: unknown value type 13"));
  ByteWriter array;
  array.PutString("k");
  array.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kArray));
  array.Put<uint32_t>(99);
  array.Put<uint64_t>(1);
  EXPECT_THAT(OpenBytes(RawFile(3, 0, 1, array.bytes())).message(),
              HasSubstr("unknown value type 99"));
}

TEST(GgufReaderTest, NestedArraysAreSkippedButNotDecoded) {
  GgufWriter writer;
  ByteWriter nested;  // [[1, 2], [3]] of uint8
  nested.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kArray));
  nested.Put<uint64_t>(2);
  for (const std::vector<uint8_t>& inner : {std::vector<uint8_t>{1, 2}, std::vector<uint8_t>{3}}) {
    nested.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint8));
    nested.Put<uint64_t>(inner.size());
    for (const uint8_t v : inner) nested.Put(v);
  }
  writer.AddRaw("nested", GgufValueType::kArray, nested.bytes());
  writer.AddU32("after", 5);
  const std::string path = WriteTempFile("nested.gguf", writer.Bytes());
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file->GetInt("after"), 5);
  EXPECT_THAT(file->GetIntArray("nested").status().message(), HasSubstr("array of array"));
  EXPECT_EQ(Render(*file, "nested"), "[array of 2 array]");
}

TEST(GgufReaderTest, RejectsDeeplyNestedArrays) {
  ByteWriter kv;
  kv.PutString("deep");
  kv.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kArray));
  for (int i = 0; i < 20; ++i) {
    kv.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kArray));
    kv.Put<uint64_t>(1);
  }
  EXPECT_THAT(OpenBytes(RawFile(3, 0, 1, kv.bytes())).message(), HasSubstr("nested deeper"));
}

TEST(GgufReaderTest, RejectsDuplicateKeysAndTensors) {
  GgufWriter keys;
  keys.AddU32("k", 1);
  keys.AddU32("k", 2);
  EXPECT_THAT(OpenBytes(keys.Bytes()).message(), HasSubstr("duplicate metadata key 'k'"));

  GgufWriter tensors;
  const std::vector<float> values(4, 1.0f);
  tensors.AddF32Tensor("t", {4}, values);
  tensors.AddF32Tensor("t", {4}, values);
  EXPECT_THAT(OpenBytes(tensors.Bytes()).message(), HasSubstr("duplicate tensor 't'"));
}

TEST(GgufReaderTest, RejectsBadTensorInfo) {
  const auto open_with = [](std::vector<int64_t> ne, GgmlType type, size_t bytes) {
    GgufWriter writer;
    writer.AddTensor("t", std::move(ne), type, std::vector<std::byte>(bytes));
    return OpenBytes(writer.Bytes());
  };
  EXPECT_THAT(open_with({}, GgmlType::kF32, 4).message(), HasSubstr("has 0 dimensions"));
  EXPECT_THAT(open_with({1, 1, 1, 1, 1}, GgmlType::kF32, 4).message(),
              HasSubstr("has 5 dimensions"));
  EXPECT_THAT(open_with({4, 0}, GgmlType::kF32, 16).message(), HasSubstr("dimension 1 = 0"));
  EXPECT_THAT(open_with({int64_t{1} << 40, int64_t{1} << 40}, GgmlType::kF32, 4).message(),
              HasSubstr("overflows"));
  EXPECT_THAT(open_with({16}, GgmlType::kQ8_0, 34).message(),
              HasSubstr("row length 16 is not a multiple of the Q8_0 block (32)"));
  // 576 = 18 blocks of 32 values, but not whole 256-value super-blocks (as SmolLM2's rows).
  EXPECT_THAT(open_with({576, 4}, GgmlType::kQ4_K, 9 * 144).message(),
              HasSubstr("row length 576 is not a multiple of the Q4_K block (256)"));
  EXPECT_THAT(open_with({int64_t{1} << 62}, GgmlType::kF32, 4).message(), HasSubstr("overflow"));
  EXPECT_THAT(open_with({1024}, GgmlType::kF32, 4).message(),
              HasSubstr("lies outside the 4 bytes of the data section"));
  EXPECT_TRUE(open_with({32}, GgmlType::kQ8_0, 34).ok());
}

TEST(GgufReaderTest, RejectsUnknownGgmlTypeByNumber) {
  GgufWriter writer;
  writer.AddTensor("t", {4}, static_cast<GgmlType>(4), std::vector<std::byte>(16));
  EXPECT_THAT(OpenBytes(writer.Bytes()).message(), HasSubstr("tensor 't': unknown ggml type 4"));
  GgufWriter high;
  high.AddTensor("t", {4}, static_cast<GgmlType>(1000), std::vector<std::byte>(16));
  EXPECT_THAT(OpenBytes(high.Bytes()).message(), HasSubstr("unknown ggml type 1000"));
}

TEST(GgufReaderTest, RejectsMisalignedAndOutOfFileData) {
  GgufWriter writer;
  const std::vector<float> values(8, 1.0f);
  writer.AddF32Tensor("t", {8}, values);
  std::vector<std::byte> bytes = writer.Bytes();
  // The tensor's offset is the last 8 bytes of its info, just before the data padding.
  const size_t offset_at = writer.HeaderBytes() - 8;
  const auto patch_offset = [&](uint64_t offset) {
    std::vector<std::byte> patched = bytes;
    std::memcpy(patched.data() + offset_at, &offset, sizeof(offset));
    return OpenBytes(patched);
  };
  ASSERT_TRUE(patch_offset(0).ok());
  EXPECT_THAT(patch_offset(4).message(), HasSubstr("not a multiple of the alignment 32"));
  EXPECT_THAT(patch_offset(32).message(), HasSubstr("lies outside"));
  EXPECT_THAT(patch_offset(~uint64_t{0} - 31).message(), HasSubstr("lies outside"));
}

TEST(GgufReaderTest, ValidatesAlignment) {
  for (const uint32_t alignment : {0u, 3u, 48u}) {
    GgufWriter writer;
    writer.SetAlignment(alignment);
    EXPECT_THAT(OpenBytes(writer.Bytes()).message(), HasSubstr("general.alignment")) << alignment;
  }
  GgufWriter wrong_type;
  wrong_type.AddString("general.alignment", "32");
  EXPECT_THAT(OpenBytes(wrong_type.Bytes()).message(), HasSubstr("expected an integer"));

  GgufWriter good;
  good.SetAlignment(64);
  const std::vector<float> a(3, 1.0f);
  const std::vector<float> b(2, 2.0f);
  good.AddF32Tensor("a", {3}, a);
  good.AddF32Tensor("b", {2}, b);
  absl::StatusOr<GgufFile> file = GgufFile::Open(WriteTempFile("aligned.gguf", good.Bytes()));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->FindTensor("b")->offset, 64u);
  std::vector<float> out(2);
  ASSERT_TRUE(Dequantize(GgmlType::kF32, file->TensorData(*file->FindTensor("b")), out).ok());
  EXPECT_THAT(out, ElementsAre(2.0f, 2.0f));
}

TEST(GgufReaderTest, MissingFileIsAnError) {
  EXPECT_FALSE(GgufFile::Open(::pulse::testing::TempPath("does-not-exist.gguf")).ok());
}

}  // namespace
}  // namespace pulse
