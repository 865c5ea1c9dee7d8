#include "core/format/dequant.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

// Built with -ffp-contract=off (see CMakeLists.txt): ggml's reference computes d * q + m with two
// roundings, and a fused multiply-add would change the last bit.

namespace pulse {
namespace {

struct TypeTraits {
  GgmlType type;
  std::string_view name;
  int64_t block_elements;
  int64_t block_bytes;
};

// ggml's type_traits (blck_size, type_size).
constexpr TypeTraits kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},
    {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},
    {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ8_1, "Q8_1", 32, 40},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},
    {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},
    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},
    {GgmlType::kMXFP4, "MXFP4", 32, 17},
    {GgmlType::kNVFP4, "NVFP4", 64, 36},
    {GgmlType::kQ1_0, "Q1_0", 128, 18},
};

const TypeTraits* FindTraits(uint32_t number) {
  for (const TypeTraits& traits : kTypes) {
    if (static_cast<uint32_t>(traits.type) == number) return &traits;
  }
  return nullptr;
}

// Every GgmlType enumerator is in kTypes, so this never fails for a valid enum value.
const TypeTraits& Traits(GgmlType type) { return *FindTraits(static_cast<uint32_t>(type)); }

uint16_t LoadU16(const std::byte* p) {
  uint16_t value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

// --- one block of each type, as ggml's dequantize_row_* ---------------------------------------

void DecodeF16(const std::byte* block, float* out) { *out = LoadHalf(block); }

void DecodeBf16(const std::byte* block, float* out) { *out = Bf16ToFloat(LoadU16(block)); }

template <int64_t kBlockElements, int64_t kBlockBytes, void (*kDecode)(const std::byte*, float*)>
void DecodeBlocks(std::span<const std::byte> src, std::span<float> dst) {
  const size_t blocks = dst.size() / kBlockElements;
  for (size_t b = 0; b < blocks; ++b) {
    kDecode(src.data() + b * kBlockBytes, dst.data() + b * kBlockElements);
  }
}

}  // namespace

absl::StatusOr<GgmlType> GgmlTypeFromNumber(uint32_t value) {
  const TypeTraits* traits = FindTraits(value);
  if (traits == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown ggml type ", value));
  }
  return traits->type;
}

std::string_view GgmlTypeName(GgmlType type) { return Traits(type).name; }
int64_t GgmlBlockElements(GgmlType type) { return Traits(type).block_elements; }
int64_t GgmlBlockBytes(GgmlType type) { return Traits(type).block_bytes; }

bool CanDequantize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<int64_t> TensorBytes(GgmlType type, int64_t elements) {
  const TypeTraits& traits = Traits(type);
  if (elements < 0 || elements % traits.block_elements != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d elements of %s are not a whole number of %d-value blocks", elements,
                        traits.name, traits.block_elements));
  }
  const int64_t blocks = elements / traits.block_elements;
  if (blocks > std::numeric_limits<int64_t>::max() / traits.block_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d elements of %s overflow a byte count", elements, traits.name));
  }
  return blocks * traits.block_bytes;
}

absl::Status Dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst) {
  if (!CanDequantize(type)) {
    return absl::UnimplementedError(
        absl::StrFormat("dequantizing ggml type %s is not implemented", GgmlTypeName(type)));
  }
  PULSE_ASSIGN_OR_RETURN(const int64_t bytes, TensorBytes(type, static_cast<int64_t>(dst.size())));
  if (static_cast<uint64_t>(bytes) != src.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("%d values of %s take %d bytes, got %d",
                                                      dst.size(), GgmlTypeName(type), bytes,
                                                      src.size()));
  }
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst.data(), src.data(), src.size());
      break;
    case GgmlType::kF16:
      DecodeBlocks<1, 2, DecodeF16>(src, dst);
      break;
    case GgmlType::kBF16:
      DecodeBlocks<1, 2, DecodeBf16>(src, dst);
      break;
    case GgmlType::kQ8_0:
      DecodeBlocks<32, 34, DecodeQ8_0>(src, dst);
      break;
    case GgmlType::kQ4_0:
      DecodeBlocks<32, 18, DecodeQ4_0>(src, dst);
      break;
    case GgmlType::kQ4_1:
      DecodeBlocks<32, 20, DecodeQ4_1>(src, dst);
      break;
    case GgmlType::kQ4_K:
      DecodeBlocks<kGgmlSuperBlockValues, kQ4_KBlockBytes, DecodeQ4_K>(src, dst);
      break;
    case GgmlType::kQ6_K:
      DecodeBlocks<kGgmlSuperBlockValues, kQ6_KBlockBytes, DecodeQ6_K>(src, dst);
      break;
    default:
      break;  // CanDequantize() said no above
  }
  return absl::OkStatus();
}

}  // namespace pulse
