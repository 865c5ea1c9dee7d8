#include "core/sched/capacity.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/backend/block_estimator.h"
#include "core/kv/block_table.h"
#include "core/kv/kv_cache.h"
#include "core/offload/selection.h"
#include "core/offload/staged_prefill.h"

namespace pulse {
namespace {

// The default KV cache: 8 full contexts, but never more than this.
constexpr int64_t kDefaultKvContexts = 8;
constexpr int64_t kDefaultKvBytes = int64_t{1} << 30;    // without a backend memory limit
constexpr int64_t kDefaultHostBytes = int64_t{4} << 30;  // the default host tier at most
constexpr double kDefaultKvShare = 0.7;                  // of a backend's free memory

// The offload tiers of an engine with offload: resolves their sizes left at 0 and sets the
// limits' host and slot blocks. `token_bytes`: KV bytes of one token in every layer.
absl::Status SizeOffloadTiers(const PagedKvLayout& layout, int32_t num_heads, int64_t token_bytes,
                              EngineOptions& options, SchedulerLimits& limits) {
  OffloadConfig& offload = *options.offload;
  PULSE_RETURN_IF_ERROR(BlockSelector::Create(layout, num_heads, offload.selection).status());
  if (offload.host_tokens == 0) {
    offload.host_tokens =
        std::min(kDefaultKvContexts * options.max_context, kDefaultHostBytes / token_bytes);
  }
  if (offload.slot_tokens == 0) {
    offload.slot_tokens = std::min(
        int64_t{options.max_batch} * std::min(offload.selection.budget_tokens, options.max_context),
        kDefaultKvBytes / token_bytes);
  }
  offload.host_tokens = std::max<int64_t>(offload.host_tokens, options.block_tokens);
  offload.slot_tokens = std::max<int64_t>(offload.slot_tokens, options.block_tokens);
  limits.host_blocks = BlocksForTokens(offload.host_tokens, options.block_tokens);
  limits.prefix_cache = offload.prefix_cache;
  limits.slot_blocks = BlocksForTokens(offload.slot_tokens, options.block_tokens);
  return absl::OkStatus();
}

}  // namespace

// Rank r's cache of `blocks` blocks of `layout` (as rank 0's, of the rank's KV heads) and its
// runner, connected to its peers through `ranks` (null at one rank).
absl::StatusOr<ModelRunner> CreateRank(std::shared_ptr<const Model> shard, PagedKvLayout layout,
                                       int32_t blocks, const ModelRunnerOptions& options,
                                       std::unique_ptr<Communicator> ranks) {
  Backend& backend = shard->backend();
  layout.num_kv_heads = shard->dims().num_kv_heads;
  layout.type = backend.kv_type();
  PULSE_ASSIGN_OR_RETURN(KvCache cache,
                         KvCache::Create(backend, layout, shard->config().num_layers, blocks));
  return ModelRunner::Create(std::move(shard), std::move(cache), options, std::move(ranks));
}

absl::StatusOr<EngineCapacity> AllocateCapacity(const ShardedModel& sharded,
                                                const EngineOptions& options) {
  if (sharded.shards.empty() || (sharded.shards.size() > 1 && !sharded.connect)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a model of %d shards and %s", sharded.shards.size(),
                        sharded.connect ? "a way to connect them" : "none to connect them"));
  }
  const std::shared_ptr<const Model>& model = sharded.shards.front();
  const ModelConfig& config = model->config();
  EngineOptions resolved = options;
  resolved.block_tokens = ResolveBlockTokens(options.block_tokens, options.offload.has_value());
  if (resolved.max_context == 0) resolved.max_context = config.max_position;
  if (resolved.max_context < 2 || resolved.max_context > config.max_position) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_context = %d is outside [2, the model's context %d]",
                        resolved.max_context, config.max_position));
  }
  Backend& backend = model->backend();
  const PagedKvLayout layout{.block_tokens = resolved.block_tokens,
                             .num_kv_heads = model->dims().num_kv_heads,
                             .head_dim = config.head_dim,
                             .type = backend.kv_type()};
  // KV bytes of one token in every layer.
  const int64_t token_bytes =
      int64_t{config.num_layers} * layout.block_bytes() / layout.block_tokens;
  if (resolved.offload) {
    PULSE_RETURN_IF_ERROR(ValidateEstimator(resolved.offload->estimator, layout));
  }
  // With offload, every host-tier block keeps its summary on the device (the dense pool's blocks
  // are attended densely or written back before they are candidates: none needs one).
  const int64_t summary_block_bytes =
      resolved.offload
          ? int64_t{config.num_layers} * SummaryBytes(layout, resolved.offload->estimator)
          : 0;
  SchedulerLimits limits{.max_batch = resolved.max_batch,
                         .prefill_chunk = resolved.prefill_chunk,
                         .max_step_tokens = resolved.max_step_tokens,
                         .block_tokens = resolved.block_tokens,
                         .block_bytes = token_bytes * resolved.block_tokens,
                         .admission = resolved.admission,
                         .min_budget_tokens = resolved.min_budget_tokens};
  if (resolved.offload) {
    PULSE_RETURN_IF_ERROR(
        SizeOffloadTiers(layout, model->dims().num_heads, token_bytes, resolved, limits));
  }
  const int64_t block_bytes = limits.block_bytes;
  const int32_t max_blocks_per_seq =
      BlocksForTokens(resolved.max_context - 1, resolved.block_tokens);
  if (resolved.offload) {
    limits.staging_blocks = StagedPrefill::Blocks(max_blocks_per_seq, resolved.max_step_tokens,
                                                  resolved.max_batch, resolved.block_tokens);
  }
  // Device bytes of the offload tiers: the slots' KV, the host tier's summaries and the staging
  // area of a prompt prefilled offloaded.
  const int64_t tier_bytes = int64_t{limits.slot_blocks} * block_bytes +
                             int64_t{limits.host_blocks} * summary_block_bytes +
                             StagedPrefill::Bytes(layout, limits.staging_blocks);
  if (resolved.kv_capacity_tokens == 0 && resolved.kv_memory_bytes > 0) {
    // Whole blocks within what the tiers leave.
    const int64_t blocks = (resolved.kv_memory_bytes - tier_bytes) / block_bytes;
    if (blocks < 1) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "kv_memory_bytes = %d leaves no KV cache block: the offload tiers take %d bytes (their "
          "slots, the host tier's summaries and the staging area of an offloaded prompt), a block "
          "of KV cache %d",
          resolved.kv_memory_bytes, tier_bytes, block_bytes));
    }
    resolved.kv_capacity_tokens = blocks * resolved.block_tokens;
  } else if (resolved.kv_capacity_tokens == 0) {
    // A backend with memory of its own (a GPU) gives the KV cache a share of what the offload
    // tiers leave free.
    const size_t available = backend.AvailableBytes();
    const int64_t kv_bytes =
        available == 0
            ? kDefaultKvBytes
            : static_cast<int64_t>(static_cast<double>(std::max<int64_t>(
                                       static_cast<int64_t>(available) - tier_bytes, 0)) *
                                   kDefaultKvShare);
    resolved.kv_capacity_tokens = std::max<int64_t>(
        resolved.block_tokens,
        std::min(kDefaultKvContexts * resolved.max_context, kv_bytes / token_bytes));
  }
  // Rounded up without the sum that overflows near INT64_MAX.
  const int64_t num_blocks = resolved.kv_capacity_tokens / resolved.block_tokens +
                             (resolved.kv_capacity_tokens % resolved.block_tokens != 0 ? 1 : 0);
  if (num_blocks + limits.slot_blocks > std::numeric_limits<int32_t>::max() ||
      limits.host_blocks < 0 || limits.slot_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%skv_capacity_tokens = %d and the offload tiers (%d host blocks, %d slots) are too many "
        "blocks of %d tokens",
        options.kv_capacity_tokens == 0 && options.kv_memory_bytes > 0
            ? absl::StrFormat("kv_memory_bytes = %d makes ", options.kv_memory_bytes)
            : "",
        resolved.kv_capacity_tokens, limits.host_blocks, limits.slot_blocks,
        resolved.block_tokens));
  }
  const ModelRunnerOptions runner_options{
      .max_step_tokens = resolved.max_step_tokens,
      .max_seqs = resolved.max_batch,
      .max_blocks_per_seq = max_blocks_per_seq,
      .offload = resolved.offload,
      .decode_graphs = resolved.decode_graphs,
      // The adaptive choice splits only offloaded steps, in two.
      .max_micro_batches = resolved.micro_batches > 0 ? resolved.micro_batches
                           : resolved.offload         ? 2
                                                      : 1};
  std::vector<std::unique_ptr<Communicator>> communicators(sharded.shards.size());
  if (sharded.shards.size() > 1) {
    PULSE_ASSIGN_OR_RETURN(communicators, sharded.connect());
  }
  if (communicators.size() != sharded.shards.size()) {
    return absl::InternalError(absl::StrFormat("%d communicators for %d ranks",
                                               communicators.size(), sharded.shards.size()));
  }
  std::vector<ModelRunner> ranks;
  for (size_t r = 0; r < sharded.shards.size(); ++r) {
    PULSE_ASSIGN_OR_RETURN(
        ModelRunner rank,
        CreateRank(sharded.shards[r], layout, static_cast<int32_t>(num_blocks + limits.slot_blocks),
                   runner_options, std::move(communicators[r])));
    ranks.push_back(std::move(rank));
  }
  PULSE_ASSIGN_OR_RETURN(ParallelRunner runner, ParallelRunner::Create(std::move(ranks)));
  return EngineCapacity{.options = resolved,
                        .limits = limits,
                        .dense_blocks = static_cast<int32_t>(num_blocks),
                        .kv_memory_bytes = num_blocks * block_bytes + tier_bytes,
                        .runner = std::move(runner)};
}

}  // namespace pulse
