// Everything about offloading one engine's KV, in one place: how a decode step selects blocks,
// how big the two tiers are, how the device tier evicts and how recall moves blocks. The C ABI's
// pulse_engine_params map to it once (capi/src/params.cc); the engine sizes what is left at 0
// (core/sched/capacity.cc) and hands the result to the model runner and the scheduler.
#pragma once

#include <cstdint>
#include <optional>

#include "core/backend/block_estimator.h"
#include "core/backend/block_scores.h"
#include "core/backend/copy_plan.h"
#include "core/base/status.h"
#include "core/offload/selection.h"

namespace pulse {

enum class EvictionKind : uint8_t { kLru, kScoreAware };

struct OffloadConfig {
  // The selection every offloaded request decodes with unless it asks for its own budget, sinks
  // and window (the mode is the engine's: the device tier is laid out for it).
  SelectionOptions selection = {};
  // How a block's summary estimates a query's attention to it (core/backend/block_estimator.h):
  // by default every key at int4 (a box a token at radius 0, its q.k), which picks the blocks
  // holding the keys the query attends to; docs/design/selection.md says why over key boxes.
  BlockEstimator estimator = {.boxes = 0, .radius = 0.0f, .precision = SummaryPrecision::kInt4};
  // The host tier's capacity in tokens (of every layer). The engine resolves 0 to its default;
  // for a model runner 0 means no host tier: sparse rows then select among resident blocks only.
  int64_t host_tokens = 0;
  // The device tier's slots in tokens: the picks of the requests decoding at once must fit.
  // The engine resolves 0 to its default; for a model runner it goes with host_tokens.
  int64_t slot_tokens = 0;
  // The host tier is pinned in chunks of about this many bytes as admission needs them (pinning
  // costs about 0.8 s a GiB, and a machine pins well below its memory).
  int64_t host_chunk_bytes = int64_t{1} << 30;
  EvictionKind eviction = EvictionKind::kLru;
  // Whether the blocks an offloaded request's resident set gives up (its prompt's as its first
  // decode step begins, then each block that leaves the window) also go to the device tier's free
  // slots, where its first picks of them are hits (they are evicted first). Off: the host tier
  // alone keeps them, and every first pick of one is recalled.
  bool fill_free_slots = true;
  // How recall moves blocks: kAuto and kGather run the copy engine's kernel over the recall list
  // the device built; kBatchDma and kPerChunk (baselines) copy the list to the host and plan
  // DMA from it there, a host wait a layer.
  CopyExecutor executor = CopyExecutor::kAuto;
  // How the host tier stores blocks (core/backend/kv_codec.h): the device's bytes, or fp8 E4M3
  // with a scale per KV head's keys or values, which halves a bf16 block's host memory and
  // recall (a quarter of an f32 block's) at fp8's precision; summaries are taken from the exact
  // blocks.
  HostCodec host_codec = HostCodec::kRaw;
  // Prefix caching: the full blocks of a request's prompt stay in the host tier, named by their
  // tokens (core/kv/block_key.h), once it decodes (a resident request's copied there, when the
  // host tier has room); an offloaded request whose prompt starts with cached blocks holds them
  // too (one copy, counted once), skips their prefill and prefills the rest staged (reading them
  // from the host tier). Unreferenced cached blocks stay until the host tier needs their room,
  // the least recently released first. A request the engine places runs offloaded when its
  // prompt starts with a cached block. Engines only (the scheduler's); off by default.
  bool prefix_cache = false;
  // For benchmarks: picks drawn at a stated step-to-step reuse instead of by the summaries'
  // scores (core/backend/block_scores.h); the scores are still computed, and selection, tables
  // and recall run on the drawn ones. Empty (the default): picks by score.
  std::optional<SyntheticPicks> synthetic_picks = std::nullopt;
  // The first this many layers attend densely in every sparse row, the others through its
  // selection. For the selection study (pulse-offload-accuracy --dense-layers): only without a
  // host tier so far, since an offloaded request's blocks of those layers would have to stay
  // resident.
  int32_t dense_layers = 0;
  // With a model split over tensor-parallel ranks (docs/design/tensor-parallel.md), SoloHead's
  // one block set a layer: false (the default) picks it from every rank's query heads, whose
  // bounds each rank gathers, so that the ranks pick what one rank would; true lets each rank pick
  // a set of its own from its own heads, with no collective. Nothing changes at one rank.
  bool rank_sets = false;

  // InvalidArgument naming the first field that is out of range.
  absl::Status Validate() const;
};

}  // namespace pulse
