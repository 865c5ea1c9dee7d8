#include "core/backend/copy_plan.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"

namespace pulse {
namespace {

struct Range {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  size_t chunk = 0;
};

// The bytes a chunk reads and writes: the same without a codec, else a block in each form.
struct Extents {
  size_t src = 0;
  size_t dst = 0;
};

Extents ChunkExtents(const CopyPlan& plan, const CopyChunk& chunk) {
  if (plan.codec == HostCodec::kRaw) return {chunk.bytes, chunk.bytes};
  const auto host = static_cast<size_t>(HostBlockBytes(plan.layout, plan.codec));
  return plan.direction == CopyDirection::kHostToDevice ? Extents{host, chunk.bytes}
                                                        : Extents{chunk.bytes, host};
}

absl::Status CheckChunk(const CopyChunk& chunk, Extents extents, size_t index) {
  const auto src = reinterpret_cast<uintptr_t>(chunk.src);
  const auto dst = reinterpret_cast<uintptr_t>(chunk.dst);
  if (src == 0 || dst == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("copy plan: chunk %u has a null pointer", index));
  }
  if (extents.src == 0 || extents.dst == 0 || extents.src % kCopyAlignment != 0 ||
      extents.dst % kCopyAlignment != 0 || src % kCopyAlignment != 0 || dst % kCopyAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "copy plan: chunk %u (%u bytes) is empty or not %u-byte aligned in size, source or "
        "destination",
        index, chunk.bytes, kCopyAlignment));
  }
  const uintptr_t max = std::numeric_limits<uintptr_t>::max();
  if (src > max - extents.src || dst > max - extents.dst) {
    return absl::InvalidArgumentError(
        absl::StrFormat("copy plan: chunk %u runs past the end of the address space", index));
  }
  return absl::OkStatus();
}

absl::Status Overlap(size_t a, size_t b, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "copy plan: the destination of chunk %u overlaps the %s of chunk %u", a, what, b));
}

}  // namespace

std::string_view CopyExecutorName(CopyExecutor executor) {
  switch (executor) {
    case CopyExecutor::kAuto:
      return "auto";
    case CopyExecutor::kGather:
      return "gather";
    case CopyExecutor::kBatchDma:
      return "batch-dma";
    case CopyExecutor::kPerChunk:
      return "per-chunk";
  }
  return "unknown";
}

absl::Status ValidateCopyPlan(const CopyPlan& plan) {
  if (plan.direction != CopyDirection::kHostToDevice &&
      plan.direction != CopyDirection::kDeviceToHost) {
    return absl::InvalidArgumentError("copy plan: invalid direction");
  }
  if (CopyExecutorName(plan.executor) == "unknown") {
    return absl::InvalidArgumentError("copy plan: invalid executor");
  }
  if (plan.codec != HostCodec::kRaw) {
    const PagedKvLayout& layout = plan.layout;
    if (!HostCodecStores(plan.codec, layout) || layout.block_tokens < 1 ||
        layout.num_kv_heads < 1 || layout.head_dim < 1) {
      return absl::InvalidArgumentError(
          "copy plan: a codec needs a valid codec and a layout of f32 or bf16 blocks");
    }
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      if (plan.chunks[i].bytes != static_cast<size_t>(layout.block_bytes())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("copy plan: chunk %u of %u bytes is not one block of %d bytes", i,
                            plan.chunks[i].bytes, layout.block_bytes()));
      }
    }
  }
  std::vector<Range> dsts(plan.chunks.size());
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const CopyChunk& chunk = plan.chunks[i];
    const Extents extents = ChunkExtents(plan, chunk);
    PULSE_RETURN_IF_ERROR(CheckChunk(chunk, extents, i));
    const auto dst = reinterpret_cast<uintptr_t>(chunk.dst);
    dsts[i] = {dst, dst + extents.dst, i};
  }
  std::sort(dsts.begin(), dsts.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < dsts.size(); ++i) {
    if (dsts[i].begin < dsts[i - 1].end) {
      return Overlap(dsts[i].chunk, dsts[i - 1].chunk, "destination");
    }
  }
  // The destinations are disjoint and sorted: only the last one starting before a source's end
  // can reach into that source. Sources outside the span of all destinations (every source, when
  // host and device memory are apart) need no search.
  const uintptr_t lowest = dsts.empty() ? 0 : dsts.front().begin;
  const uintptr_t highest = dsts.empty() ? 0 : dsts.back().end;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const auto src = reinterpret_cast<uintptr_t>(plan.chunks[i].src);
    const uintptr_t src_end = src + ChunkExtents(plan, plan.chunks[i]).src;
    if (src_end <= lowest || src >= highest) continue;
    const auto after = std::lower_bound(
        dsts.begin(), dsts.end(), src_end,
        [](const Range& range, uintptr_t address) { return range.begin < address; });
    if (after != dsts.begin() && std::prev(after)->end > src) {
      return Overlap(std::prev(after)->chunk, i, "source");
    }
  }
  return absl::OkStatus();
}

}  // namespace pulse
