#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "core/format/dequant.h"
#include "core/format/hf_config.h"
#include "core/model/expected_tensors.h"
#include "core/model/tensor_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/format/gguf_writer.h"

namespace pulse {
namespace {

using ::pulse::testing::ByteWriter;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr std::string_view kConfig = R"({"architectures": ["LlamaForCausalLM"],
  "model_type": "llama", "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
  "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 10,
  "max_position_embeddings": 64, "tie_word_embeddings": true})";

struct Tensor {
  std::string name;
  std::string dtype;  // safetensors name: F32, F16, BF16
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
  std::vector<float> expected;
};

// Random finite values of `dtype`, with their exact float values.
Tensor RandomTensor(std::string name, std::string dtype, std::vector<int64_t> shape,
                    std::mt19937& rng) {
  Tensor tensor{std::move(name), std::move(dtype), std::move(shape), {}, {}};
  int64_t elements = 1;
  for (const int64_t dim : tensor.shape) elements *= dim;
  ByteWriter out;
  for (int64_t i = 0; i < elements; ++i) {
    if (tensor.dtype == "F32") {
      const float value = std::uniform_real_distribution<float>(-2, 2)(rng);
      out.Put(value);
      tensor.expected.push_back(value);
    } else {
      // Exponent bits below all-ones keep the value finite in both 16-bit formats.
      const auto bits = static_cast<uint16_t>(rng() & 0xBFFF);
      out.Put(bits);
      tensor.expected.push_back(tensor.dtype == "F16" ? HalfToFloat(bits) : Bf16ToFloat(bits));
    }
  }
  tensor.data = std::move(out.bytes());
  return tensor;
}

std::vector<Tensor> ModelTensors(uint32_t seed) {
  std::mt19937 rng(seed);
  ModelConfig config = *ParseHfConfig(kConfig);
  const char* dtypes[] = {"F32", "F16", "BF16"};
  std::vector<Tensor> tensors;
  for (const TensorInfo& info : ExpectedTensors(config)) {
    tensors.push_back(RandomTensor(info.name, dtypes[tensors.size() % 3], info.shape, rng));
  }
  return tensors;
}

// A safetensors file: header JSON (with optional edits), then the data back to back.
std::vector<std::byte> SafetensorsBytes(const std::vector<Tensor>& tensors,
                                        const std::function<void(Json&)>& edit = {}) {
  Json header = {{"__metadata__", {{"format", "pt"}}}};
  ByteWriter data;
  for (const Tensor& tensor : tensors) {
    const size_t begin = data.bytes().size();
    data.PutBytes(tensor.data);
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {begin, data.bytes().size()}}};
  }
  if (edit) edit(header);
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  ByteWriter out;
  out.Put<uint64_t>(text.size());
  out.PutBytes(std::as_bytes(std::span(text.data(), text.size())));
  out.PutBytes(data.bytes());
  return out.bytes();
}

class SafetensorsSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::pulse::testing::TempPath("model");
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Write("config.json", std::as_bytes(std::span(kConfig.data(), kConfig.size())));
  }
  void Write(const std::string& name, std::span<const std::byte> bytes) {
    std::ofstream out(dir_ / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  void WriteText(const std::string& name, const std::string& text) {
    Write(name, std::as_bytes(std::span(text.data(), text.size())));
  }
  absl::Status OpenStatus() { return OpenTensorSource(dir_.string()).status(); }

  std::filesystem::path dir_;
};

void ExpectValues(const TensorSource& source, const std::vector<Tensor>& tensors) {
  ASSERT_EQ(source.tensors().size(), tensors.size());
  for (const Tensor& tensor : tensors) {
    std::vector<float> out(tensor.expected.size());
    ASSERT_TRUE(source.Read(tensor.name, out).ok()) << tensor.name;
    ASSERT_EQ(0, std::memcmp(out.data(), tensor.expected.data(), out.size() * sizeof(float)))
        << tensor.name;
  }
}

TEST_F(SafetensorsSourceTest, SingleFileReadsExactValues) {
  const std::vector<Tensor> tensors = ModelTensors(1);
  Write("model.safetensors", SafetensorsBytes(tensors));
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenTensorSource(dir_.string());
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->format(), "safetensors");
  EXPECT_EQ((*source)->config().hidden_size, 8);
  EXPECT_TRUE(CheckTensors(**source).ok()) << CheckTensors(**source);
  EXPECT_EQ((*source)->metadata().at("model_type"), "llama");
  EXPECT_EQ((*source)->metadata().at("hidden_size"), "8");
  ExpectValues(**source, tensors);
  for (const TensorInfo& info : (*source)->tensors()) {
    const auto written = std::find_if(tensors.begin(), tensors.end(),
                                      [&](const Tensor& t) { return t.name == info.name; });
    ASSERT_NE(written, tensors.end());
    EXPECT_EQ(info.stored_type, written->dtype == "F32"   ? "f32"
                                : written->dtype == "F16" ? "f16"
                                                          : "bf16");
    EXPECT_EQ(info.shape, written->shape);
  }
  std::vector<float> out(3);
  EXPECT_EQ((*source)->Read("nope", out).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE((*source)->Read("model.norm.weight", out).ok());
}

TEST_F(SafetensorsSourceTest, ShardedThroughTheIndexAndConfigPath) {
  const std::vector<Tensor> tensors = ModelTensors(2);
  const size_t half = tensors.size() / 2;
  Write("model-00001-of-00002.safetensors",
        SafetensorsBytes({tensors.begin(), tensors.begin() + half}));
  Write("model-00002-of-00002.safetensors",
        SafetensorsBytes({tensors.begin() + half, tensors.end()}));
  Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", Json::object()}};
  for (size_t i = 0; i < tensors.size(); ++i) {
    index["weight_map"][tensors[i].name] =
        i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  WriteText("model.safetensors.index.json", index.dump());
  absl::StatusOr<std::unique_ptr<TensorSource>> source =
      OpenTensorSource((dir_ / "config.json").string());
  ASSERT_TRUE(source.ok()) << source.status();
  ExpectValues(**source, tensors);

  // A tensor the index places in a shard that lacks it.
  index["weight_map"][tensors[0].name] = "model-00002-of-00002.safetensors";
  WriteText("model.safetensors.index.json", index.dump());
  EXPECT_THAT(OpenStatus().message(),
              HasSubstr("lists tensor 'model.embed_tokens.weight' in shard "
                        "'model-00002-of-00002.safetensors', which does not have it"));
  // A shard that does not exist.
  index["weight_map"][tensors[0].name] = "model-00003-of-00002.safetensors";
  WriteText("model.safetensors.index.json", index.dump());
  EXPECT_THAT(OpenStatus().message(), HasSubstr("model-00003-of-00002.safetensors"));
  // A shard name that leaves the directory.
  index["weight_map"][tensors[0].name] = "../model.safetensors";
  WriteText("model.safetensors.index.json", index.dump());
  EXPECT_THAT(OpenStatus().message(), HasSubstr("is not a file name"));
  WriteText("model.safetensors.index.json", R"({"weight": {}})");
  EXPECT_THAT(OpenStatus().message(), HasSubstr("no \"weight_map\""));
}

TEST_F(SafetensorsSourceTest, RejectsCorruptHeaders) {
  const std::vector<Tensor> tensors = ModelTensors(3);
  const std::vector<std::byte> good = SafetensorsBytes(tensors);
  const auto open_with = [&](std::vector<std::byte> bytes) {
    Write("model.safetensors", bytes);
    return std::string(OpenStatus().message());
  };
  EXPECT_THAT(open_with({good.begin(), good.begin() + 4}), HasSubstr("shorter than"));
  EXPECT_THAT(open_with({good.begin(), good.begin() + 100}), HasSubstr("header length"));
  std::vector<std::byte> huge = good;
  const uint64_t absurd = uint64_t{1} << 62;
  std::memcpy(huge.data(), &absurd, sizeof(absurd));
  EXPECT_THAT(open_with(huge), HasSubstr("header length 4611686018427387904"));
  std::vector<std::byte> bad_json = good;
  bad_json[8] = std::byte{'x'};
  EXPECT_THAT(open_with(bad_json), HasSubstr("bad JSON"));
  // Data cut short: the last tensor's offsets run past the end.
  EXPECT_THAT(open_with({good.begin(), good.end() - 1}), HasSubstr("lie outside"));

  const auto edited = [&](const std::function<void(Json&)>& edit) {
    return open_with(SafetensorsBytes(tensors, edit));
  };
  EXPECT_THAT(edited([](Json& h) { h["model.norm.weight"]["dtype"] = "I64"; }),
              HasSubstr("tensor 'model.norm.weight': dtype I64 is not supported"));
  EXPECT_THAT(edited([](Json& h) { h["model.norm.weight"]["shape"] = {2, 3}; }), HasSubstr("hold"));
  EXPECT_THAT(edited([](Json& h) { h["model.norm.weight"]["shape"] = {-1}; }),
              HasSubstr("shape [-1] is invalid"));
  EXPECT_THAT(edited([](Json& h) {
                h["model.norm.weight"]["data_offsets"] = {0, 1u << 30};
              }),
              HasSubstr("lie outside"));
  EXPECT_THAT(edited([](Json& h) {
                h["model.norm.weight"]["data_offsets"] = {8, 4};
              }),
              HasSubstr("lie outside"));
  EXPECT_THAT(edited([](Json& h) { h["model.norm.weight"].erase("dtype"); }),
              HasSubstr("needs dtype"));
  EXPECT_THAT(edited([](Json& h) { h["model.norm.weight"] = 5; }), HasSubstr("not an object"));
  EXPECT_THAT(edited([](Json& h) { h = Json::array(); }), HasSubstr("not a JSON object"));
}

TEST_F(SafetensorsSourceTest, MissingPiecesAreNamed) {
  EXPECT_EQ(OpenStatus().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(OpenStatus().message(), HasSubstr("neither model.safetensors"));
  std::filesystem::remove(dir_ / "config.json");
  EXPECT_THAT(OpenStatus().message(), HasSubstr("config.json"));
  WriteText("config.json", R"({"model_type": "bert"})");
  EXPECT_THAT(OpenStatus().message(), HasSubstr("'bert'"));
}

TEST(OpenTensorSourceTest, NamesThePath) {
  const std::string missing = ::pulse::testing::TempPath("no-such-model");
  EXPECT_EQ(OpenTensorSource(missing).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(OpenTensorSource(missing).status().message(), HasSubstr(missing));
  const std::string text =
      ::pulse::testing::WriteTempFile("notes.txt", std::as_bytes(std::span("hello", 5)));
  EXPECT_THAT(OpenTensorSource(text).status().message(),
              HasSubstr("is neither a GGUF file nor a model directory"));
}

}  // namespace
}  // namespace pulse
