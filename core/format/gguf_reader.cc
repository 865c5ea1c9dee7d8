#include "core/format/gguf_reader.h"

#include <bit>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pulse {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader decodes little-endian files on a little-endian host");

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 8;      // arrays of arrays deeper than this are rejected
constexpr size_t kMaxRenderedArray = 8;  // longer arrays render as "[array of N type]"
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

template <typename T>
T Load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

bool IsValidValueType(uint32_t type) {
  return type <= static_cast<uint32_t>(GgufValueType::kFloat64);
}

// Bytes of a fixed-size value; 0 for strings and arrays.
size_t ScalarBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsInteger(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

// The integer of `type` (IsInteger) at `p`; false when a uint64 does not fit int64.
bool DecodeInt(GgufValueType type, const std::byte* p, int64_t* out) {
  switch (type) {
    case GgufValueType::kUint8:
      *out = Load<uint8_t>(p);
      return true;
    case GgufValueType::kInt8:
      *out = Load<int8_t>(p);
      return true;
    case GgufValueType::kUint16:
      *out = Load<uint16_t>(p);
      return true;
    case GgufValueType::kInt16:
      *out = Load<int16_t>(p);
      return true;
    case GgufValueType::kUint32:
      *out = Load<uint32_t>(p);
      return true;
    case GgufValueType::kInt32:
      *out = Load<int32_t>(p);
      return true;
    case GgufValueType::kInt64:
      *out = Load<int64_t>(p);
      return true;
    case GgufValueType::kUint64: {
      const auto value = Load<uint64_t>(p);
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *out = static_cast<int64_t>(value);
      return true;
    }
    default:
      return false;
  }
}

double DecodeFloat(GgufValueType type, const std::byte* p) {
  return type == GgufValueType::kFloat32 ? double{Load<float>(p)} : Load<double>(p);
}

// A string value at the start of `bytes` (length-prefixed; validated by the parser).
std::string_view DecodeString(const std::byte* p) {
  const auto length = Load<uint64_t>(p);
  return {reinterpret_cast<const char*>(p + 8), static_cast<size_t>(length)};
}

std::string RenderScalar(GgufValueType type, const std::byte* p) {
  if (IsInteger(type)) {
    if (type == GgufValueType::kUint64) return absl::StrCat(Load<uint64_t>(p));
    int64_t value = 0;
    DecodeInt(type, p, &value);
    return absl::StrCat(value);
  }
  switch (type) {
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
      return absl::StrCat(DecodeFloat(type, p));
    case GgufValueType::kBool:
      return Load<uint8_t>(p) != 0 ? "true" : "false";
    case GgufValueType::kString:
      return std::string(DecodeString(p));
    default:
      return "";
  }
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

// Reads the header of a mapped file front to back, bounds-checking every read.
class GgufFile::Parser {
 public:
  Parser(std::span<const std::byte> bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  absl::Status Parse(GgufFile& file);

 private:
  absl::Status Error(std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrFormat("GGUF '%s': %s", path_, message));
  }
  absl::Status Truncated(std::string_view what) const {
    return Error(absl::StrFormat("truncated at byte %d reading %s", pos_, what));
  }
  size_t remaining() const { return bytes_.size() - pos_; }

  absl::Status Skip(uint64_t n, std::string_view what) {
    if (n > remaining()) return Truncated(what);
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    if (sizeof(T) > remaining()) return Truncated(what);
    const T value = Load<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return value;
  }
  absl::StatusOr<std::string_view> ReadString(std::string_view what);
  absl::StatusOr<GgufValueType> ReadValueType(std::string_view what);
  // Skips one value of `type`, checking it lies inside the file.
  absl::Status SkipValue(GgufValueType type, std::string_view key, int depth);
  // Skips `count` elements of `type`, bounding count by the bytes left before looping.
  absl::Status SkipArrayElements(GgufValueType type, uint64_t count, std::string_view key,
                                 int depth);
  absl::Status ParseMetadata(GgufFile& file);
  absl::Status ParseTensorInfo(GgufFile& file);
  absl::Status PlaceTensorData(GgufFile& file);

  std::span<const std::byte> bytes_;
  const std::string& path_;
  size_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
};

absl::StatusOr<std::string_view> GgufFile::Parser::ReadString(std::string_view what) {
  PULSE_ASSIGN_OR_RETURN(const uint64_t length, Read<uint64_t>(what));
  if (length > remaining()) {
    return Error(absl::StrFormat(
        "%s: string of %d bytes at byte %d runs past the end of the file (%d bytes)", what, length,
        pos_ - 8, bytes_.size()));
  }
  std::string_view text(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
  pos_ += length;
  return text;
}

absl::StatusOr<GgufValueType> GgufFile::Parser::ReadValueType(std::string_view what) {
  PULSE_ASSIGN_OR_RETURN(const uint32_t type, Read<uint32_t>(what));
  if (!IsValidValueType(type)) {
    return Error(absl::StrFormat("%s: unknown value type %d", what, type));
  }
  return static_cast<GgufValueType>(type);
}

absl::Status GgufFile::Parser::SkipValue(GgufValueType type, std::string_view key, int depth) {
  if (type == GgufValueType::kString) return ReadString(key).status();
  if (type != GgufValueType::kArray) return Skip(ScalarBytes(type), key);
  if (depth >= kMaxArrayNesting) {
    return Error(absl::StrFormat("%s: arrays nested deeper than %d", key, kMaxArrayNesting));
  }
  PULSE_ASSIGN_OR_RETURN(const GgufValueType element_type, ReadValueType(key));
  PULSE_ASSIGN_OR_RETURN(const uint64_t count, Read<uint64_t>(key));
  return SkipArrayElements(element_type, count, key, depth + 1);
}

absl::Status GgufFile::Parser::SkipArrayElements(GgufValueType type, uint64_t count,
                                                 std::string_view key, int depth) {
  // Strings take at least their 8-byte length, arrays their 12-byte header.
  const size_t min_bytes = type == GgufValueType::kString  ? 8
                           : type == GgufValueType::kArray ? 12
                                                           : ScalarBytes(type);
  if (count > remaining() / min_bytes) {
    return Error(absl::StrFormat("%s: array of %d %s does not fit in the %d bytes left", key, count,
                                 GgufValueTypeName(type), remaining()));
  }
  if (ScalarBytes(type) != 0) return Skip(count * min_bytes, key);
  for (uint64_t i = 0; i < count; ++i) {
    PULSE_RETURN_IF_ERROR(SkipValue(type, key, depth));
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ParseMetadata(GgufFile& file) {
  // Each entry takes at least 13 bytes: key length, value type, a 1-byte value.
  if (kv_count_ > remaining() / 13) {
    return Error(absl::StrCat("metadata count ", kv_count_, " does not fit in the file"));
  }
  file.entries_.reserve(kv_count_);
  for (uint64_t i = 0; i < kv_count_; ++i) {
    PULSE_ASSIGN_OR_RETURN(const std::string_view key,
                           ReadString(absl::StrCat("metadata key #", i)));
    GgufMetadataEntry entry;
    entry.key = key;
    PULSE_ASSIGN_OR_RETURN(entry.type, ReadValueType(key));
    size_t start = pos_;
    if (entry.type == GgufValueType::kArray) {
      PULSE_ASSIGN_OR_RETURN(entry.element_type, ReadValueType(key));
      PULSE_ASSIGN_OR_RETURN(entry.count, Read<uint64_t>(key));
      start = pos_;
      PULSE_RETURN_IF_ERROR(SkipArrayElements(entry.element_type, entry.count, key, 1));
    } else {
      PULSE_RETURN_IF_ERROR(SkipValue(entry.type, key, 0));
    }
    entry.payload = bytes_.subspan(start, pos_ - start);
    if (!file.entry_index_.emplace(key, file.entries_.size()).second) {
      return Error(absl::StrFormat("duplicate metadata key '%s'", key));
    }
    file.entries_.push_back(entry);
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::ParseTensorInfo(GgufFile& file) {
  // Each tensor info takes at least 32 bytes: name length, n_dims, one dim, type, offset.
  if (tensor_count_ > remaining() / 32) {
    return Error(absl::StrCat("tensor count ", tensor_count_, " does not fit in the file"));
  }
  file.tensors_.reserve(tensor_count_);
  for (uint64_t i = 0; i < tensor_count_; ++i) {
    GgufTensorInfo info;
    PULSE_ASSIGN_OR_RETURN(const std::string_view name,
                           ReadString(absl::StrCat("name of tensor #", i)));
    info.name = std::string(name);
    const std::string what = absl::StrFormat("tensor '%s'", name);
    PULSE_ASSIGN_OR_RETURN(const uint32_t n_dims, Read<uint32_t>(what));
    if (n_dims < 1 || n_dims > kMaxDims) {
      return Error(absl::StrCat(what, " has ", n_dims, " dimensions, expected 1 to ", kMaxDims));
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      PULSE_ASSIGN_OR_RETURN(const uint64_t ne, Read<uint64_t>(what));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          static_cast<int64_t>(ne) > std::numeric_limits<int64_t>::max() / elements) {
        return Error(absl::StrCat(what, ": dimension ", d, " = ", ne,
                                  " is zero or overflows the element count"));
      }
      info.ne.push_back(static_cast<int64_t>(ne));
      elements *= static_cast<int64_t>(ne);
    }
    info.elements = elements;
    PULSE_ASSIGN_OR_RETURN(const uint32_t type_number, Read<uint32_t>(what));
    const absl::StatusOr<GgmlType> type = GgmlTypeFromNumber(type_number);
    if (!type.ok()) return Error(absl::StrCat(what, ": ", type.status().message()));
    info.type = *type;
    if (info.ne[0] % GgmlBlockElements(info.type) != 0) {
      return Error(absl::StrFormat("%s: row length %d is not a multiple of the %s block (%d)", what,
                                   info.ne[0], GgmlTypeName(info.type),
                                   GgmlBlockElements(info.type)));
    }
    const absl::StatusOr<int64_t> bytes = TensorBytes(info.type, elements);
    if (!bytes.ok()) return Error(absl::StrCat(what, ": ", bytes.status().message()));
    info.bytes = *bytes;
    PULSE_ASSIGN_OR_RETURN(info.offset, Read<uint64_t>(what));
    if (!file.tensor_index_.emplace(name, file.tensors_.size()).second) {
      return Error(absl::StrFormat("duplicate tensor '%s'", name));
    }
    file.tensors_.push_back(std::move(info));
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::PlaceTensorData(GgufFile& file) {
  file.data_offset_ = (pos_ + file.alignment_ - 1) / file.alignment_ * file.alignment_;
  if (file.tensors_.empty()) return absl::OkStatus();
  const uint64_t size = bytes_.size();
  if (file.data_offset_ > size) return Truncated("the tensor data section");
  const uint64_t data_bytes = size - file.data_offset_;
  for (const GgufTensorInfo& info : file.tensors_) {
    if (info.offset % file.alignment_ != 0) {
      return Error(absl::StrCat("tensor '", info.name, "': data offset ", info.offset,
                                " is not a multiple of the alignment ", file.alignment_));
    }
    const auto bytes = static_cast<uint64_t>(info.bytes);
    if (info.offset > data_bytes || bytes > data_bytes - info.offset) {
      return Error(absl::StrCat("tensor '", info.name, "': data [", info.offset, ", +", bytes,
                                ") lies outside the ", data_bytes, " bytes of the data section"));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Parser::Parse(GgufFile& file) {
  if (bytes_.size() < sizeof(kMagic) || std::memcmp(bytes_.data(), kMagic, sizeof(kMagic)) != 0) {
    return Error("not a GGUF file (bad magic)");
  }
  pos_ = sizeof(kMagic);
  PULSE_ASSIGN_OR_RETURN(file.version_, Read<uint32_t>("the version"));
  if (file.version_ != 2 && file.version_ != 3) {
    const uint32_t swapped = file.version_ >> 24;
    if ((file.version_ & 0xFFFFFF) == 0 && (swapped == 2 || swapped == 3)) {
      return Error("big-endian GGUF files are not supported");
    }
    return Error(absl::StrCat("unsupported version ", file.version_, " (expected 2 or 3)"));
  }
  PULSE_ASSIGN_OR_RETURN(tensor_count_, Read<uint64_t>("the tensor count"));
  PULSE_ASSIGN_OR_RETURN(kv_count_, Read<uint64_t>("the metadata count"));
  PULSE_RETURN_IF_ERROR(ParseMetadata(file));
  if (file.Has("general.alignment")) {
    const absl::StatusOr<int64_t> alignment = file.GetInt("general.alignment");
    if (!alignment.ok()) return alignment.status();
    if (*alignment <= 0 || static_cast<uint64_t>(*alignment) > kMaxAlignment ||
        !std::has_single_bit(static_cast<uint64_t>(*alignment))) {
      return Error(
          absl::StrCat("general.alignment = ", *alignment, " is not a power of two up to 2^30"));
    }
    file.alignment_ = static_cast<uint64_t>(*alignment);
  }
  PULSE_RETURN_IF_ERROR(ParseTensorInfo(file));
  return PlaceTensorData(file);
}

absl::StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  PULSE_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  GgufFile file(std::move(mapped));
  // The parser's views point into the mapping, which stays put when `file` moves.
  PULSE_RETURN_IF_ERROR(Parser(file.file_.bytes(), file.path()).Parse(file));
  return file;
}

// --- metadata -------------------------------------------------------------------------------

const GgufMetadataEntry* GgufFile::FindMetadata(std::string_view key) const {
  const auto it = entry_index_.find(key);
  return it == entry_index_.end() ? nullptr : &entries_[it->second];
}

namespace {

absl::StatusOr<const GgufMetadataEntry*> FindTyped(const GgufFile& file, std::string_view key,
                                                   std::string_view expected,
                                                   bool (*matches)(const GgufMetadataEntry&)) {
  const GgufMetadataEntry* entry = file.FindMetadata(key);
  // A key read without asking Has() first is one the model needs: the file is incomplete.
  if (entry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF '%s' has no metadata key '%s'", file.path(), key));
  }
  if (!matches(*entry)) {
    std::string actual(GgufValueTypeName(entry->type));
    if (entry->type == GgufValueType::kArray) {
      actual = absl::StrFormat("array of %s", GgufValueTypeName(entry->element_type));
    }
    return absl::InvalidArgumentError(absl::StrFormat("GGUF '%s': metadata '%s' is %s, expected %s",
                                                      file.path(), key, actual, expected));
  }
  return entry;
}

bool IsArrayOf(const GgufMetadataEntry& entry, bool (*element)(GgufValueType)) {
  return entry.type == GgufValueType::kArray && element(entry.element_type);
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  PULSE_ASSIGN_OR_RETURN(const GgufMetadataEntry* entry,
                         FindTyped(*this, key, "string", [](const GgufMetadataEntry& e) {
                           return e.type == GgufValueType::kString;
                         }));
  return std::string(DecodeString(entry->payload.data()));
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  PULSE_ASSIGN_OR_RETURN(const GgufMetadataEntry* entry,
                         FindTyped(*this, key, "an integer",
                                   [](const GgufMetadataEntry& e) { return IsInteger(e.type); }));
  int64_t value = 0;
  if (!DecodeInt(entry->type, entry->payload.data(), &value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF '%s': metadata '%s' does not fit in int64", path(), key));
  }
  return value;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  PULSE_ASSIGN_OR_RETURN(const GgufMetadataEntry* entry,
                         FindTyped(*this, key, "a float", [](const GgufMetadataEntry& e) {
                           return e.type == GgufValueType::kFloat32 ||
                                  e.type == GgufValueType::kFloat64;
                         }));
  return DecodeFloat(entry->type, entry->payload.data());
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  PULSE_ASSIGN_OR_RETURN(const GgufMetadataEntry* entry,
                         FindTyped(*this, key, "bool", [](const GgufMetadataEntry& e) {
                           return e.type == GgufValueType::kBool;
                         }));
  return Load<uint8_t>(entry->payload.data()) != 0;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  PULSE_ASSIGN_OR_RETURN(const GgufMetadataEntry* entry,
                         FindTyped(*this, key, "array of string", [](const GgufMetadataEntry& e) {
                           return IsArrayOf(
                               e, [](GgufValueType t) { return t == GgufValueType::kString; });
                         }));
  std::vector<std::string> values;
  values.reserve(entry->count);
  const std::byte* p = entry->payload.data();
  for (uint64_t i = 0; i < entry->count; ++i) {
    const std::string_view text = DecodeString(p);
    values.emplace_back(text);
    p += 8 + text.size();
  }
  return values;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  PULSE_ASSIGN_OR_RETURN(const GgufMetadataEntry* entry,
                         FindTyped(*this, key, "array of integer", [](const GgufMetadataEntry& e) {
                           return IsArrayOf(e, [](GgufValueType t) {
                             return IsInteger(t) || t == GgufValueType::kBool;
                           });
                         }));
  const GgufValueType type =
      entry->element_type == GgufValueType::kBool ? GgufValueType::kUint8 : entry->element_type;
  const size_t stride = ScalarBytes(type);
  std::vector<int64_t> values(entry->count);
  for (uint64_t i = 0; i < entry->count; ++i) {
    if (!DecodeInt(type, entry->payload.data() + i * stride, &values[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("GGUF '%s': metadata '%s'[%d] does not fit in int64", path(), key, i));
    }
  }
  return values;
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  PULSE_ASSIGN_OR_RETURN(const GgufMetadataEntry* entry,
                         FindTyped(*this, key, "array of float", [](const GgufMetadataEntry& e) {
                           return IsArrayOf(e, [](GgufValueType t) {
                             return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
                           });
                         }));
  const size_t stride = ScalarBytes(entry->element_type);
  std::vector<float> values(entry->count);
  for (uint64_t i = 0; i < entry->count; ++i) {
    values[i] =
        static_cast<float>(DecodeFloat(entry->element_type, entry->payload.data() + i * stride));
  }
  return values;
}

std::string GgufFile::RenderValue(const GgufMetadataEntry& entry) const {
  if (entry.type != GgufValueType::kArray) return RenderScalar(entry.type, entry.payload.data());
  if (entry.element_type == GgufValueType::kArray || entry.count > kMaxRenderedArray) {
    return absl::StrFormat("[array of %d %s]", entry.count, GgufValueTypeName(entry.element_type));
  }
  std::vector<std::string> items;
  const std::byte* p = entry.payload.data();
  for (uint64_t i = 0; i < entry.count; ++i) {
    std::string item = RenderScalar(entry.element_type, p);
    if (entry.element_type == GgufValueType::kString) {
      p += 8 + item.size();
      item = absl::StrCat("\"", item, "\"");
    } else {
      p += ScalarBytes(entry.element_type);
    }
    items.push_back(std::move(item));
  }
  return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
}

// --- tensors --------------------------------------------------------------------------------

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> GgufFile::TensorData(const GgufTensorInfo& info) const {
  return file_.bytes().subspan(data_offset_ + info.offset, static_cast<size_t>(info.bytes));
}

}  // namespace pulse
