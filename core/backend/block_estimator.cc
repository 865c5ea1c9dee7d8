#include "core/backend/block_estimator.h"

#include <cmath>
#include <span>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/backend/summary_radius.h"

namespace pulse {

BlockEstimator ForBlocks(BlockEstimator estimator, int32_t block_tokens) {
  if (estimator.boxes == 0) estimator.boxes = block_tokens;
  return estimator;
}

absl::Status ValidateEstimator(const BlockEstimator& given, const PagedKvLayout& layout) {
  const BlockEstimator estimator = ForBlocks(given, layout.block_tokens);
  if (estimator.boxes < 1 || layout.block_tokens < 1 ||
      layout.block_tokens % estimator.boxes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a block summary of %d boxes for blocks of %d tokens (the boxes must divide the tokens)",
        estimator.boxes, layout.block_tokens));
  }
  if (!SummaryRadiusValid(estimator.radius)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a summary radius must be in [0, 1], not %g", estimator.radius));
  }
  if (estimator.precision != SummaryPrecision::kF32 &&
      estimator.precision != SummaryPrecision::kBf16 &&
      estimator.precision != SummaryPrecision::kInt8 &&
      estimator.precision != SummaryPrecision::kInt4) {
    return absl::InvalidArgumentError("an unknown summary precision");
  }
  if (estimator.combine != BoxCombine::kMax && estimator.combine != BoxCombine::kLogSumExp) {
    return absl::InvalidArgumentError("an unknown way of combining a block's boxes");
  }
  if (estimator.precision == SummaryPrecision::kInt4 && layout.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "int4 block summaries pack two channels a byte: a head_dim of %d is odd", layout.head_dim));
  }
  return absl::OkStatus();
}

float LogSumExpScale(int32_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

int32_t SummaryBoxRows(const BlockEstimator& estimator) { return estimator.radius == 0.0f ? 1 : 2; }

SummaryRowLayout SummaryRows(const PagedKvLayout& layout, const BlockEstimator& given) {
  const BlockEstimator estimator = ForBlocks(given, layout.block_tokens);
  const auto head_dim = static_cast<size_t>(layout.head_dim);
  size_t row_bytes = head_dim * sizeof(float);
  switch (estimator.precision) {
    case SummaryPrecision::kBf16:
      row_bytes = head_dim * sizeof(uint16_t);
      break;
    case SummaryPrecision::kInt8:
      row_bytes = head_dim;
      break;
    case SummaryPrecision::kInt4:
      row_bytes = head_dim / 2;
      break;
    case SummaryPrecision::kF32:
      break;
  }
  return {.rows = static_cast<size_t>(layout.num_kv_heads) * static_cast<size_t>(estimator.boxes) *
                  static_cast<size_t>(SummaryBoxRows(estimator)),
          .row_bytes = row_bytes};
}

int64_t SummaryBytes(const PagedKvLayout& layout, const BlockEstimator& estimator) {
  const SummaryRowLayout rows = SummaryRows(layout, estimator);
  return static_cast<int64_t>(HasRowScales(estimator.precision) ? rows.scale_offset(rows.rows)
                                                                : rows.row_offset(rows.rows));
}

int64_t ScoreMultiplyAdds(const PagedKvLayout& layout, const BlockEstimator& given,
                          int32_t num_heads) {
  const BlockEstimator estimator = ForBlocks(given, layout.block_tokens);
  return int64_t{num_heads} * estimator.boxes * SummaryBoxRows(estimator) * layout.head_dim;
}

std::string EstimatorName(const BlockEstimator& given, int32_t block_tokens) {
  const BlockEstimator estimator = ForBlocks(given, block_tokens);
  std::string name = estimator.boxes == 1 ? "box"
                     : estimator.boxes == block_tokens
                         ? "tokens"
                         : absl::StrFormat("boxes%d", estimator.boxes);
  name += absl::StrFormat("-r%g", estimator.radius);
  if (estimator.precision == SummaryPrecision::kBf16) name += "-bf16";
  if (estimator.precision == SummaryPrecision::kInt8) name += "-int8";
  if (estimator.precision == SummaryPrecision::kInt4) name += "-int4";
  if (estimator.combine == BoxCombine::kLogSumExp) name += "-lse";
  return name;
}

absl::StatusOr<BlockEstimator> ParseEstimator(std::string_view name) {
  const std::vector<std::string> parts = absl::StrSplit(std::string(name), '-');
  BlockEstimator estimator;
  const auto refuse = [&] {
    return absl::InvalidArgumentError(absl::StrFormat(
        "estimator '%s': expected box, boxesN or tokens, then -rR, then optionally -bf16, -int8 "
        "or -int4, then optionally -lse (say box-r0, boxes4-r0, tokens-r0-int4-lse)",
        name));
  };
  if (parts.size() < 2 || parts[1].empty() || parts[1][0] != 'r') return refuse();
  // What follows the radius: a precision, then "lse", each optional.
  std::span<const std::string> rest = std::span<const std::string>(parts).subspan(2);
  if (!rest.empty() && rest.back() == "lse") {
    estimator.combine = BoxCombine::kLogSumExp;
    rest = rest.first(rest.size() - 1);
  }
  if (rest.size() > 1) return refuse();
  if (parts[0] == "box") {
    estimator.boxes = 1;
  } else if (parts[0] == "tokens") {
    estimator.boxes = 0;
  } else if (!parts[0].starts_with("boxes") ||
             !absl::SimpleAtoi(parts[0].substr(5), &estimator.boxes) || estimator.boxes < 1) {
    return refuse();
  }
  if (!absl::SimpleAtof(parts[1].substr(1), &estimator.radius)) return refuse();
  if (!rest.empty()) {
    if (rest[0] == "bf16") {
      estimator.precision = SummaryPrecision::kBf16;
    } else if (rest[0] == "int8") {
      estimator.precision = SummaryPrecision::kInt8;
    } else if (rest[0] == "int4") {
      estimator.precision = SummaryPrecision::kInt4;
    } else {
      return refuse();
    }
  }
  return estimator;
}

}  // namespace pulse
