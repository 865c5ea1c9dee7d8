#include "core/model/tensor_source.h"

#include <cstring>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "core/base/mapped_file.h"
#include "core/model/file_sources.h"

namespace pulse {

int64_t TensorInfo::elements() const {
  int64_t count = 1;
  for (const int64_t dim : shape) count *= dim;
  return count;
}

absl::StatusOr<DType> TensorSource::ReadBlocks(std::string_view name,
                                               std::vector<std::byte>& /*out*/) const {
  return absl::UnimplementedError(
      absl::StrFormat("%s source: '%s' is not kept in blocks", format(), name));
}

absl::StatusOr<std::unique_ptr<TensorSource>> OpenTensorSource(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrFormat("no model at '%s'", path));
  }
  if (std::filesystem::is_directory(status)) return OpenSafetensorsSource(path);
  if (std::filesystem::is_regular_file(status)) {
    PULSE_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::Open(path));
    if (file.bytes().size() >= 4 && std::memcmp(file.bytes().data(), "GGUF", 4) == 0) {
      return OpenGgufSource(path);
    }
    if (std::filesystem::path(path).filename() == "config.json") {
      return OpenSafetensorsSource(path);
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "'%s' is neither a GGUF file nor a model directory (or its config.json)", path));
}

}  // namespace pulse
