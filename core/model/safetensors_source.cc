// OpenSafetensorsSource: a TensorSource over a Hugging Face model directory (config.json and
// one or more .safetensors files, each memory-mapped).
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data; offsets count from the end of the header.
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/base/mapped_file.h"
#include "core/model/dequant.h"
#include "core/model/file_sources.h"
#include "nlohmann/json.hpp"

namespace pulse {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the format's own limit is 100 MB
constexpr std::string_view kSingleFile = "model.safetensors";
constexpr std::string_view kIndexFile = "model.safetensors.index.json";

struct Shard {
  MappedFile file;
  uint64_t data_start = 0;  // 8 + header length
};

struct StoredTensor {
  const Shard* shard = nullptr;
  GgmlType type = GgmlType::kF32;  // F32, F16 or BF16, which ggml decodes the same way
  uint64_t begin = 0;              // from data_start
  uint64_t bytes = 0;
};

struct ParsedTensor {
  TensorInfo info;
  StoredTensor stored;
};

absl::Status ShardError(const std::string& path, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrFormat("safetensors '%s': %s", path, message));
}

absl::StatusOr<Json> ParseJson(std::span<const std::byte> bytes, const std::string& path) {
  try {
    return Json::parse(reinterpret_cast<const char*>(bytes.data()),
                       reinterpret_cast<const char*>(bytes.data() + bytes.size()));
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("'%s': bad JSON: %s", path, e.what()));
  }
}

absl::StatusOr<std::pair<GgmlType, std::string>> ParseDtype(const Json& dtype) {
  const std::string name = dtype.is_string() ? dtype.get<std::string>() : dtype.dump();
  if (name == "F32") return std::make_pair(GgmlType::kF32, std::string("f32"));
  if (name == "F16") return std::make_pair(GgmlType::kF16, std::string("f16"));
  if (name == "BF16") return std::make_pair(GgmlType::kBF16, std::string("bf16"));
  return absl::InvalidArgumentError(
      absl::StrFormat("dtype %s is not supported (F32, F16, BF16)", name));
}

// One header entry, checked against the `data_bytes` that follow the header.
absl::StatusOr<ParsedTensor> ParseTensorEntry(const std::string& name, const Json& entry,
                                              uint64_t data_bytes) {
  if (!entry.is_object()) return absl::InvalidArgumentError("is not an object");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || shape == entry.end() || offsets == entry.end()) {
    return absl::InvalidArgumentError("needs dtype, shape and data_offsets");
  }
  ParsedTensor tensor;
  tensor.info.name = name;
  PULSE_ASSIGN_OR_RETURN(std::tie(tensor.stored.type, tensor.info.stored_type), ParseDtype(*dtype));
  if (!shape->is_array()) return absl::InvalidArgumentError("shape is not an array");
  int64_t elements = 1;
  for (const Json& dim : *shape) {
    if (!dim.is_number_unsigned() ||
        dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrFormat("shape %s is invalid", shape->dump()));
    }
    const auto size = static_cast<int64_t>(dim.get<uint64_t>());
    if (size != 0 && elements > std::numeric_limits<int64_t>::max() / size) {
      return absl::InvalidArgumentError(absl::StrFormat("shape %s overflows", shape->dump()));
    }
    elements *= size;
    tensor.info.shape.push_back(size);
  }
  if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("data_offsets %s is not [begin, end]", offsets->dump()));
  }
  const auto begin = (*offsets)[0].get<uint64_t>();
  const auto end = (*offsets)[1].get<uint64_t>();
  if (begin > end || end > data_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data_offsets [%d, %d] lie outside the %d data bytes", begin, end, data_bytes));
  }
  PULSE_ASSIGN_OR_RETURN(const int64_t bytes, TensorBytes(tensor.stored.type, elements));
  if (end - begin != static_cast<uint64_t>(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("data_offsets [%d, %d] hold %d bytes, but %d %s values take %d", begin, end,
                        end - begin, elements, tensor.info.stored_type, bytes));
  }
  tensor.stored.begin = begin;
  tensor.stored.bytes = end - begin;
  return tensor;
}

// Maps one .safetensors file and parses its header into `tensors` (by name).
absl::StatusOr<std::unique_ptr<Shard>> OpenShard(
    const std::string& path, absl::flat_hash_map<std::string, ParsedTensor>& tensors) {
  PULSE_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  const std::span<const std::byte> bytes = file.bytes();
  if (bytes.size() < 8) return ShardError(path, "shorter than its 8-byte header length");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), sizeof(header_bytes));
  if (header_bytes > bytes.size() - 8 || header_bytes > kMaxHeaderBytes) {
    return ShardError(path, absl::StrFormat("header length %d exceeds the file (%d bytes) or "
                                            "the 100 MB limit",
                                            header_bytes, bytes.size()));
  }
  PULSE_ASSIGN_OR_RETURN(const Json header, ParseJson(bytes.subspan(8, header_bytes), path));
  if (!header.is_object()) return ShardError(path, "the header is not a JSON object");

  auto shard = std::make_unique<Shard>(Shard{std::move(file), 8 + header_bytes});
  const uint64_t data_bytes = bytes.size() - shard->data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    absl::StatusOr<ParsedTensor> tensor = ParseTensorEntry(name, entry, data_bytes);
    if (!tensor.ok()) {
      return ShardError(path, absl::StrFormat("tensor '%s': %s", name, tensor.status().message()));
    }
    tensor->stored.shard = shard.get();
    if (!tensors.emplace(name, *std::move(tensor)).second) {
      return ShardError(path, absl::StrFormat("tensor '%s' appears twice", name));
    }
  }
  return shard;
}

class SafetensorsSource final : public TensorSource {
 public:
  static absl::StatusOr<std::unique_ptr<TensorSource>> Open(const std::filesystem::path& dir);

  std::string_view format() const override { return "safetensors"; }
  const ModelConfig& config() const override { return config_; }
  std::span<const TensorInfo> tensors() const override { return tensors_; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }
  absl::Status Read(std::string_view name, std::span<float> out) const override;

 private:
  SafetensorsSource() = default;
  absl::Status ReadConfig(const std::filesystem::path& dir);
  absl::Status OpenShards(const std::filesystem::path& dir);
  absl::Status OpenIndexedShards(const std::filesystem::path& dir, const std::string& index_path);
  void Add(ParsedTensor tensor);

  ModelConfig config_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, StoredTensor> stored_;
};

absl::StatusOr<std::unique_ptr<TensorSource>> SafetensorsSource::Open(
    const std::filesystem::path& dir) {
  auto source = std::unique_ptr<SafetensorsSource>(new SafetensorsSource());
  PULSE_RETURN_IF_ERROR(source->ReadConfig(dir));
  PULSE_RETURN_IF_ERROR(source->OpenShards(dir));
  return source;
}

absl::Status SafetensorsSource::ReadConfig(const std::filesystem::path& dir) {
  const std::string path = (dir / "config.json").string();
  PULSE_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::Open(path));
  const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()),
                              file.bytes().size());
  absl::StatusOr<ModelConfig> config = ParseHfConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrFormat("'%s': %s", path, config.status().message()));
  }
  config_ = *std::move(config);
  PULSE_ASSIGN_OR_RETURN(const Json json, ParseJson(file.bytes(), path));
  for (const auto& [key, value] : json.items()) {
    metadata_.emplace(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return absl::OkStatus();
}

absl::Status SafetensorsSource::OpenShards(const std::filesystem::path& dir) {
  std::error_code error;
  const std::filesystem::path index = dir / kIndexFile;
  if (std::filesystem::exists(index, error)) return OpenIndexedShards(dir, index.string());
  const std::filesystem::path single = dir / kSingleFile;
  if (!std::filesystem::exists(single, error)) {
    return absl::NotFoundError(
        absl::StrFormat("'%s' has neither %s nor %s", dir.string(), kSingleFile, kIndexFile));
  }
  absl::flat_hash_map<std::string, ParsedTensor> parsed;
  PULSE_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, OpenShard(single.string(), parsed));
  shards_.push_back(std::move(shard));
  std::map<std::string, ParsedTensor> ordered(parsed.begin(), parsed.end());
  for (auto& [name, tensor] : ordered) Add(std::move(tensor));
  return absl::OkStatus();
}

absl::Status SafetensorsSource::OpenIndexedShards(const std::filesystem::path& dir,
                                                  const std::string& index_path) {
  PULSE_ASSIGN_OR_RETURN(const MappedFile index_file, MappedFile::Open(index_path));
  PULSE_ASSIGN_OR_RETURN(const Json index, ParseJson(index_file.bytes(), index_path));
  const auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (weight_map == index.end() || !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s': no \"weight_map\" object", index_path));
  }
  // Shard file name -> the tensors parsed from it.
  std::map<std::string, absl::flat_hash_map<std::string, ParsedTensor>> by_shard;
  for (const auto& [name, shard_name] : weight_map->items()) {
    if (!shard_name.is_string() ||
        std::filesystem::path(shard_name.get<std::string>()).filename() !=
            shard_name.get<std::string>()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'%s': weight_map['%s'] = %s is not a file name", index_path, name, shard_name.dump()));
    }
    by_shard[shard_name.get<std::string>()];
  }
  for (auto& [shard_name, parsed] : by_shard) {
    PULSE_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard,
                           OpenShard((dir / shard_name).string(), parsed));
    shards_.push_back(std::move(shard));
  }
  std::map<std::string, std::string> ordered;
  for (const auto& [name, shard_name] : weight_map->items()) {
    ordered.emplace(name, shard_name.get<std::string>());
  }
  for (const auto& [name, shard_name] : ordered) {
    auto& parsed = by_shard[shard_name];
    const auto it = parsed.find(name);
    if (it == parsed.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'%s' lists tensor '%s' in shard '%s', which does not have it",
                          index_path, name, shard_name));
    }
    Add(std::move(it->second));
  }
  return absl::OkStatus();
}

void SafetensorsSource::Add(ParsedTensor tensor) {
  stored_.emplace(tensor.info.name, tensor.stored);
  tensors_.push_back(std::move(tensor.info));
}

absl::Status SafetensorsSource::Read(std::string_view name, std::span<float> out) const {
  const auto it = stored_.find(std::string(name));
  if (it == stored_.end()) {
    return absl::NotFoundError(absl::StrFormat("safetensors model has no tensor '%s'", name));
  }
  const StoredTensor& stored = it->second;
  const std::span<const std::byte> data =
      stored.shard->file.bytes().subspan(stored.shard->data_start + stored.begin, stored.bytes);
  const absl::Status decoded = Dequantize(stored.type, data, out);
  if (!decoded.ok()) {
    return absl::Status(decoded.code(),
                        absl::StrFormat("reading '%s' from '%s': %s", name,
                                        stored.shard->file.path(), decoded.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorSource>> OpenSafetensorsSource(const std::string& path) {
  std::filesystem::path dir(path);
  if (dir.filename() == "config.json") dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  return SafetensorsSource::Open(dir);
}

}  // namespace pulse
