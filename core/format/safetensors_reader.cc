#include "core/format/safetensors_reader.h"

#include <cstring>
#include <filesystem>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/format/json_text.h"

namespace pulse {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the format's own limit is 100 MB

absl::Status ShardError(const std::string& path, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrFormat("safetensors '%s': %s", path, message));
}

absl::StatusOr<Json> ParseJson(std::span<const std::byte> bytes, const std::string& path) {
  return ParseJsonText(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                       absl::StrFormat("'%s'", path));
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
absl::StatusOr<SafetensorsTensorInfo> ParseTensorEntry(const std::string& name, const Json& entry,
                                                       uint64_t data_bytes) {
  if (!entry.is_object()) return absl::InvalidArgumentError("is not an object");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || shape == entry.end() || offsets == entry.end()) {
    return absl::InvalidArgumentError("needs dtype, shape and data_offsets");
  }
  SafetensorsTensorInfo tensor;
  tensor.name = name;
  PULSE_ASSIGN_OR_RETURN(std::tie(tensor.type, tensor.type_name), ParseDtype(*dtype));
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
    tensor.shape.push_back(size);
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
  PULSE_ASSIGN_OR_RETURN(const int64_t bytes, TensorBytes(tensor.type, elements));
  if (end - begin != static_cast<uint64_t>(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("data_offsets [%d, %d] hold %d bytes, but %d %s values take %d", begin, end,
                        end - begin, elements, tensor.type_name, bytes));
  }
  tensor.begin = begin;
  tensor.bytes = end - begin;
  return tensor;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  PULSE_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  SafetensorsFile file(std::move(mapped));
  const std::span<const std::byte> bytes = file.file_.bytes();
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

  file.data_start_ = 8 + header_bytes;
  const uint64_t data_bytes = bytes.size() - file.data_start_;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    absl::StatusOr<SafetensorsTensorInfo> tensor = ParseTensorEntry(name, entry, data_bytes);
    if (!tensor.ok()) {
      return ShardError(path, absl::StrFormat("tensor '%s': %s", name, tensor.status().message()));
    }
    if (!file.tensor_index_.emplace(name, file.tensors_.size()).second) {
      return ShardError(path, absl::StrFormat("tensor '%s' appears twice", name));
    }
    file.tensors_.push_back(*std::move(tensor));
  }
  return file;
}

const SafetensorsTensorInfo* SafetensorsFile::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::TensorData(const SafetensorsTensorInfo& info) const {
  return file_.bytes().subspan(data_start_ + info.begin, info.bytes);
}

absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsIndex(
    const std::string& index_path) {
  PULSE_ASSIGN_OR_RETURN(const std::string text, ReadFileText(index_path, kMaxJsonFileBytes));
  PULSE_ASSIGN_OR_RETURN(const Json index,
                         ParseJsonText(text, absl::StrFormat("'%s'", index_path)));
  const auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (weight_map == index.end() || !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s': no \"weight_map\" object", index_path));
  }
  std::map<std::string, std::string> shards;
  for (const auto& [name, shard_name] : weight_map->items()) {
    if (!shard_name.is_string() ||
        std::filesystem::path(shard_name.get<std::string>()).filename() !=
            shard_name.get<std::string>()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'%s': weight_map['%s'] = %s is not a file name", index_path, name, shard_name.dump()));
    }
    shards.emplace(name, shard_name.get<std::string>());
  }
  return shards;
}

}  // namespace pulse
