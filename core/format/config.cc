#include "core/format/config.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pulse {
namespace {

// Upper bounds far above any real model, so that an absurd value is rejected before it sizes
// an allocation.
constexpr int32_t kMaxHidden = 1 << 16;
constexpr int32_t kMaxIntermediate = 1 << 18;
constexpr int32_t kMaxLayers = 1024;
constexpr int32_t kMaxHeads = 1024;
constexpr int32_t kMaxHeadDim = 1024;
constexpr int32_t kMaxVocab = 1 << 22;
constexpr int32_t kMaxPosition = 1 << 24;

absl::Status CheckRange(std::string_view field, int64_t value, int64_t max) {
  if (value <= 0 || value > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("config: %s = %d is outside [1, %d]", field, value, max));
  }
  return absl::OkStatus();
}

absl::Status CheckPositiveFinite(std::string_view field, double value) {
  if (!(value > 0) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("config: %s = %g must be positive and finite", field, value));
  }
  return absl::OkStatus();
}

absl::Status CheckTokenId(std::string_view field, int32_t id, int32_t vocab_size) {
  if (id < 0 || id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config: %s = %d is outside the vocabulary [0, %d)", field, id, vocab_size));
  }
  return absl::OkStatus();
}

absl::Status ValidateRopeScaling(const RopeScaling& scaling) {
  if (scaling.type == RopeScaling::Type::kNone) return absl::OkStatus();
  PULSE_RETURN_IF_ERROR(CheckPositiveFinite("rope_scaling.factor", scaling.factor));
  if (scaling.type != RopeScaling::Type::kLlama3) return absl::OkStatus();
  PULSE_RETURN_IF_ERROR(
      CheckPositiveFinite("rope_scaling.low_freq_factor", scaling.low_freq_factor));
  PULSE_RETURN_IF_ERROR(
      CheckPositiveFinite("rope_scaling.high_freq_factor", scaling.high_freq_factor));
  if (!(scaling.high_freq_factor > scaling.low_freq_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: rope_scaling.high_freq_factor (", scaling.high_freq_factor,
                     ") must exceed low_freq_factor (", scaling.low_freq_factor, ")"));
  }
  return CheckRange("rope_scaling.original_max_position_embeddings", scaling.original_max_position,
                    kMaxPosition);
}

}  // namespace

std::string_view ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kMistral:
      return "mistral";
    case Architecture::kQwen2:
      return "qwen2";
  }
  return "unknown";
}

absl::Status ModelConfig::Validate() const {
  PULSE_RETURN_IF_ERROR(CheckRange("hidden_size", hidden_size, kMaxHidden));
  PULSE_RETURN_IF_ERROR(CheckRange("intermediate_size", intermediate_size, kMaxIntermediate));
  PULSE_RETURN_IF_ERROR(CheckRange("num_layers", num_layers, kMaxLayers));
  PULSE_RETURN_IF_ERROR(CheckRange("num_heads", num_heads, kMaxHeads));
  PULSE_RETURN_IF_ERROR(CheckRange("num_kv_heads", num_kv_heads, num_heads));
  PULSE_RETURN_IF_ERROR(CheckRange("head_dim", head_dim, kMaxHeadDim));
  PULSE_RETURN_IF_ERROR(CheckRange("vocab_size", vocab_size, kMaxVocab));
  PULSE_RETURN_IF_ERROR(CheckRange("max_position", max_position, kMaxPosition));
  if (num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config: num_heads (", num_heads,
                                                   ") is not a multiple of num_kv_heads (",
                                                   num_kv_heads, ")"));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: head_dim (", head_dim, ") must be even for rotary embeddings"));
  }
  PULSE_RETURN_IF_ERROR(
      CheckRange("num_heads * head_dim", int64_t{num_heads} * head_dim, kMaxHidden));
  PULSE_RETURN_IF_ERROR(CheckPositiveFinite("rms_norm_eps", rms_norm_eps));
  PULSE_RETURN_IF_ERROR(CheckPositiveFinite("rope_theta", rope_theta));
  PULSE_RETURN_IF_ERROR(ValidateRopeScaling(rope_scaling));
  if (!rope_freq_factors.empty()) {
    if (rope_freq_factors.size() != static_cast<size_t>(head_dim / 2)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: rope_freq_factors has ", rope_freq_factors.size(),
                       " values, expected head_dim / 2 = ", head_dim / 2));
    }
    for (const float factor : rope_freq_factors) {
      PULSE_RETURN_IF_ERROR(CheckPositiveFinite("rope_freq_factors[i]", factor));
    }
  }
  if (bos_token_id != -1) {
    PULSE_RETURN_IF_ERROR(CheckTokenId("bos_token_id", bos_token_id, vocab_size));
  }
  for (const int32_t eos : eos_token_ids) {
    PULSE_RETURN_IF_ERROR(CheckTokenId("eos_token_id", eos, vocab_size));
  }
  return absl::OkStatus();
}

std::vector<float> ModelConfig::RopeInverseFrequencies() const {
  const int32_t pairs = head_dim / 2;
  std::vector<float> inv_freq(pairs);
  const RopeScaling& scaling = rope_scaling;
  const double low_freq_wavelen = scaling.original_max_position / double{scaling.low_freq_factor};
  const double high_freq_wavelen = scaling.original_max_position / double{scaling.high_freq_factor};
  for (int32_t i = 0; i < pairs; ++i) {
    double freq = 1.0 / std::pow(double{rope_theta}, 2.0 * i / head_dim);
    switch (scaling.type) {
      case RopeScaling::Type::kNone:
        break;
      case RopeScaling::Type::kLinear:
        freq /= scaling.factor;
        break;
      case RopeScaling::Type::kLlama3: {
        const double wavelen = 2 * std::numbers::pi / freq;
        if (wavelen > low_freq_wavelen) {
          freq /= scaling.factor;
        } else if (wavelen >= high_freq_wavelen) {
          const double smooth =
              (scaling.original_max_position / wavelen - scaling.low_freq_factor) /
              (scaling.high_freq_factor - scaling.low_freq_factor);
          freq = (1 - smooth) * freq / scaling.factor + smooth * freq;
        }
        break;
      }
    }
    if (!rope_freq_factors.empty()) freq /= rope_freq_factors[i];
    inv_freq[i] = static_cast<float>(freq);
  }
  return inv_freq;
}

}  // namespace pulse
