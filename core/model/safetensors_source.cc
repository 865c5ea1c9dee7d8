// OpenSafetensorsSource: a TensorSource over a Hugging Face model directory (config.json and
// one or more .safetensors files, each memory-mapped; core/format/safetensors_reader.h reads them).
#include <filesystem>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/base/mapped_file.h"
#include "core/format/dequant.h"
#include "core/format/hf_config.h"
#include "core/format/json_text.h"
#include "core/format/safetensors_reader.h"
#include "core/model/file_sources.h"

namespace pulse {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kSingleFile = "model.safetensors";
constexpr std::string_view kIndexFile = "model.safetensors.index.json";

struct StoredTensor {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensorInfo* info = nullptr;
};

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
  void Add(const SafetensorsFile& file, const SafetensorsTensorInfo& info);

  ModelConfig config_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
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
  PULSE_ASSIGN_OR_RETURN(const std::string text, ReadFileText(path, kMaxJsonFileBytes));
  absl::StatusOr<ModelConfig> config = ParseHfConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrFormat("'%s': %s", path, config.status().message()));
  }
  config_ = *std::move(config);
  PULSE_ASSIGN_OR_RETURN(const Json json, ParseJsonText(text, absl::StrFormat("'%s'", path)));
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
  PULSE_ASSIGN_OR_RETURN(SafetensorsFile shard, SafetensorsFile::Open(single.string()));
  shards_.push_back(std::make_unique<SafetensorsFile>(std::move(shard)));
  const SafetensorsFile& file = *shards_.back();
  std::map<std::string_view, const SafetensorsTensorInfo*> ordered;
  for (const SafetensorsTensorInfo& info : file.tensors()) ordered.emplace(info.name, &info);
  for (const auto& [name, info] : ordered) Add(file, *info);
  return absl::OkStatus();
}

absl::Status SafetensorsSource::OpenIndexedShards(const std::filesystem::path& dir,
                                                  const std::string& index_path) {
  // Tensor name -> shard file name, by tensor name.
  PULSE_ASSIGN_OR_RETURN(const auto weight_map, ReadSafetensorsIndex(index_path));
  // Shard file name -> the file, opened in name order.
  std::map<std::string, const SafetensorsFile*> by_shard;
  for (const auto& [name, shard_name] : weight_map) by_shard[shard_name];
  for (auto& [shard_name, file] : by_shard) {
    PULSE_ASSIGN_OR_RETURN(SafetensorsFile shard,
                           SafetensorsFile::Open((dir / shard_name).string()));
    shards_.push_back(std::make_unique<SafetensorsFile>(std::move(shard)));
    file = shards_.back().get();
  }
  for (const auto& [name, shard_name] : weight_map) {
    const SafetensorsFile& file = *by_shard[shard_name];
    const SafetensorsTensorInfo* info = file.FindTensor(name);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'%s' lists tensor '%s' in shard '%s', which does not have it",
                          index_path, name, shard_name));
    }
    Add(file, *info);
  }
  return absl::OkStatus();
}

void SafetensorsSource::Add(const SafetensorsFile& file, const SafetensorsTensorInfo& info) {
  stored_.emplace(info.name, StoredTensor{&file, &info});
  tensors_.push_back(TensorInfo{info.name, info.shape, info.type_name});
}

absl::Status SafetensorsSource::Read(std::string_view name, std::span<float> out) const {
  const auto it = stored_.find(std::string(name));
  if (it == stored_.end()) {
    return absl::NotFoundError(absl::StrFormat("safetensors model has no tensor '%s'", name));
  }
  const StoredTensor& stored = it->second;
  const absl::Status decoded =
      Dequantize(stored.info->type, stored.file->TensorData(*stored.info), out);
  if (!decoded.ok()) {
    return absl::Status(decoded.code(), absl::StrFormat("reading '%s' from '%s': %s", name,
                                                        stored.file->path(), decoded.message()));
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
