#include "capi/src/params.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/backend/block_estimator.h"
#include "core/backend/paged_kv.h"
#include "core/backend/summary_radius.h"

namespace pulse::capi {
namespace {

// The seed of every engine's synthetic picks: a benchmark run is the same run each time.
constexpr uint32_t kSyntheticSeed = 0x5eed;

int32_t ToPulsePrecision(SummaryPrecision precision) {
  switch (precision) {
    case SummaryPrecision::kF32:
      return PULSE_SUMMARY_F32;
    case SummaryPrecision::kBf16:
      return PULSE_SUMMARY_BF16;
    case SummaryPrecision::kInt8:
      return PULSE_SUMMARY_INT8;
    case SummaryPrecision::kInt4:
      return PULSE_SUMMARY_INT4;
  }
  return PULSE_SUMMARY_F32;
}

}  // namespace

pulse_model_params DefaultModelParams() {
  pulse_model_params params{};
  params.struct_size = sizeof(params);
  params.threads = 0;
  params.backend = "auto";
  params.weight_type = "auto";
  params.random_seed = 0;
  params.memory_limit_bytes = 0;
  params.random_weights = 0;
  params.tensor_parallel_size = 0;
  return params;
}

pulse_engine_params DefaultEngineParams() {
  const EngineOptions options;
  pulse_engine_params params{};
  params.struct_size = sizeof(params);
  params.max_batch = options.max_batch;
  params.prefill_chunk = options.prefill_chunk;
  params.max_step_tokens = options.max_step_tokens;
  params.block_tokens = options.block_tokens;
  params.max_context = options.max_context;
  params.kv_capacity_tokens = options.kv_capacity_tokens;
  params.kv_memory_bytes = options.kv_memory_bytes;
  const OffloadConfig offload;
  params.offload_mode = PULSE_OFFLOAD_OFF;
  params.offload_budget_tokens = offload.selection.budget_tokens;
  params.offload_sink_tokens = offload.selection.sink_tokens;
  params.offload_window_tokens = offload.selection.window_tokens;
  params.offload_executor = PULSE_COPY_AUTO;
  params.offload_eviction = PULSE_EVICT_LRU;
  params.offload_host_tokens = offload.host_tokens;
  params.offload_slot_tokens = offload.slot_tokens;
  params.decode_graphs = options.decode_graphs ? 1 : 0;
  params.offload_summary_radius = offload.estimator.radius;
  params.offload_summary_boxes = offload.estimator.boxes;
  params.offload_summary_precision = ToPulsePrecision(offload.estimator.precision);
  params.offload_admission = options.admission == AdmissionKind::kOffloadEvery
                                 ? PULSE_ADMIT_OFFLOAD_EVERY
                                 : PULSE_ADMIT_IO_ADAPTIVE;
  params.micro_batches = options.micro_batches;
  params.offload_fill_free_slots = offload.fill_free_slots ? 1 : 0;
  params.offload_min_budget_tokens = options.min_budget_tokens;
  params.offload_host_codec =
      offload.host_codec == HostCodec::kFp8E4m3 ? PULSE_HOST_CODEC_FP8 : PULSE_HOST_CODEC_RAW;
  params.offload_prefix_cache = offload.prefix_cache ? 1 : 0;
  return params;
}

static_assert(PULSE_OFFLOAD_BLOCK_TOKENS == kOffloadBlockTokens &&
              PULSE_DENSE_BLOCK_TOKENS == kDenseBlockTokens);

absl::StatusOr<EngineOptions> ToEngineOptions(const pulse_engine_params& params) {
  EngineOptions options;
  options.max_batch = params.max_batch;
  options.prefill_chunk = params.prefill_chunk;
  options.max_step_tokens = params.max_step_tokens;
  options.block_tokens = params.block_tokens;
  options.max_context = params.max_context;
  options.kv_capacity_tokens = params.kv_capacity_tokens;
  options.kv_memory_bytes = params.kv_memory_bytes;
  options.micro_batches = params.micro_batches;
  if (params.decode_graphs != 0 && params.decode_graphs != 1) {
    return absl::InvalidArgumentError(absl::StrCat("pulse_engine_params.decode_graphs is ",
                                                   params.decode_graphs, "; expected 0 or 1"));
  }
  options.decode_graphs = params.decode_graphs == 1;
  if (params.offload_admission != PULSE_ADMIT_IO_ADAPTIVE &&
      params.offload_admission != PULSE_ADMIT_OFFLOAD_EVERY) {
    return absl::InvalidArgumentError(
        absl::StrCat("pulse_engine_params.offload_admission is ", params.offload_admission,
                     "; expected PULSE_ADMIT_IO_ADAPTIVE or PULSE_ADMIT_OFFLOAD_EVERY"));
  }
  options.admission = params.offload_admission == PULSE_ADMIT_OFFLOAD_EVERY
                          ? AdmissionKind::kOffloadEvery
                          : AdmissionKind::kIoAdaptive;
  if (!(params.offload_synthetic_reuse >= 0.0 && params.offload_synthetic_reuse < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pulse_engine_params.offload_synthetic_reuse is ", params.offload_synthetic_reuse,
        "; expected 0 (picks by score) or a value in "
        "(0, 1)"));
  }
  if (!SummaryRadiusValid(static_cast<float>(params.offload_summary_radius))) {
    return absl::InvalidArgumentError(absl::StrCat("pulse_engine_params.offload_summary_radius is ",
                                                   params.offload_summary_radius,
                                                   "; expected a value in [0, 1]"));
  }
  if (params.offload_fill_free_slots != 0 && params.offload_fill_free_slots != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pulse_engine_params.offload_fill_free_slots is ",
                     params.offload_fill_free_slots, "; expected 0 or 1"));
  }
  if (params.offload_host_codec != PULSE_HOST_CODEC_RAW &&
      params.offload_host_codec != PULSE_HOST_CODEC_FP8) {
    return absl::InvalidArgumentError(
        absl::StrCat("pulse_engine_params.offload_host_codec is ", params.offload_host_codec,
                     "; expected PULSE_HOST_CODEC_RAW (0) or PULSE_HOST_CODEC_FP8 (1)"));
  }
  if (params.offload_prefix_cache != 0 && params.offload_prefix_cache != 1) {
    return absl::InvalidArgumentError(absl::StrCat("pulse_engine_params.offload_prefix_cache is ",
                                                   params.offload_prefix_cache,
                                                   "; expected 0 or 1"));
  }
  if (params.offload_mode == PULSE_OFFLOAD_OFF) return options;
  if (params.offload_mode != PULSE_OFFLOAD_HEADWISE &&
      params.offload_mode != PULSE_OFFLOAD_SOLOHEAD) {
    return absl::InvalidArgumentError(absl::StrCat("pulse_engine_params.offload_mode is ",
                                                   params.offload_mode,
                                                   "; expected PULSE_OFFLOAD_OFF, _HEADWISE or "
                                                   "_SOLOHEAD"));
  }
  OffloadConfig offload;
  offload.estimator.radius = static_cast<float>(params.offload_summary_radius);
  switch (params.offload_summary_precision) {
    case PULSE_SUMMARY_F32:
      offload.estimator.precision = SummaryPrecision::kF32;
      break;
    case PULSE_SUMMARY_BF16:
      offload.estimator.precision = SummaryPrecision::kBf16;
      break;
    case PULSE_SUMMARY_INT8:
      offload.estimator.precision = SummaryPrecision::kInt8;
      break;
    case PULSE_SUMMARY_INT4:
      offload.estimator.precision = SummaryPrecision::kInt4;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("pulse_engine_params.offload_summary_precision is ",
                       params.offload_summary_precision, "; expected a PULSE_SUMMARY_* value"));
  }
  offload.estimator.boxes = params.offload_summary_boxes;
  // The radius and the precision are valid by now: what is left to refuse is the boxes.
  if (absl::Status status = ValidateEstimator(
          offload.estimator,
          PagedKvLayout{.block_tokens = ResolveBlockTokens(params.block_tokens, true)});
      !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pulse_engine_params.offload_summary_boxes is ",
                                                   params.offload_summary_boxes, ": ",
                                                   status.message()));
  }
  offload.selection.mode = params.offload_mode == PULSE_OFFLOAD_HEADWISE ? SelectionMode::kHeadWise
                                                                         : SelectionMode::kSoloHead;
  offload.selection.budget_tokens = params.offload_budget_tokens;
  if (params.offload_synthetic_reuse > 0.0) {
    offload.synthetic_picks = SyntheticPicksAt(params.offload_synthetic_reuse, kSyntheticSeed);
  }
  offload.fill_free_slots = params.offload_fill_free_slots == 1;
  offload.selection.sink_tokens = params.offload_sink_tokens;
  offload.selection.window_tokens = params.offload_window_tokens;
  switch (params.offload_executor) {
    case PULSE_COPY_AUTO:
      offload.executor = CopyExecutor::kAuto;
      break;
    case PULSE_COPY_GATHER:
      offload.executor = CopyExecutor::kGather;
      break;
    case PULSE_COPY_BATCH_DMA:
      offload.executor = CopyExecutor::kBatchDma;
      break;
    case PULSE_COPY_PER_CHUNK:
      offload.executor = CopyExecutor::kPerChunk;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("pulse_engine_params.offload_executor is ",
                                                     params.offload_executor,
                                                     "; expected a PULSE_COPY_* value"));
  }
  if (params.offload_eviction != PULSE_EVICT_LRU && params.offload_eviction != PULSE_EVICT_SCORE) {
    return absl::InvalidArgumentError(
        absl::StrCat("pulse_engine_params.offload_eviction is ", params.offload_eviction,
                     "; expected PULSE_EVICT_LRU or PULSE_EVICT_SCORE"));
  }
  offload.eviction =
      params.offload_eviction == PULSE_EVICT_SCORE ? EvictionKind::kScoreAware : EvictionKind::kLru;
  for (const auto& [name, tokens] :
       {std::pair{"offload_host_tokens", params.offload_host_tokens},
        std::pair{"offload_slot_tokens", params.offload_slot_tokens}}) {
    if (tokens < 0 || tokens > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("pulse_engine_params.", name, " is ", tokens,
                                                     "; expected 0 (the default) to ",
                                                     std::numeric_limits<int32_t>::max()));
    }
  }
  offload.host_tokens = params.offload_host_tokens;
  offload.slot_tokens = params.offload_slot_tokens;
  offload.host_codec =
      params.offload_host_codec == PULSE_HOST_CODEC_FP8 ? HostCodec::kFp8E4m3 : HostCodec::kRaw;
  offload.prefix_cache = params.offload_prefix_cache == 1;
  options.offload = offload;
  if (params.offload_min_budget_tokens < 0 ||
      params.offload_min_budget_tokens > params.offload_budget_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pulse_engine_params.offload_min_budget_tokens is ", params.offload_min_budget_tokens,
        "; expected 0 (the default) to offload_budget_tokens (", params.offload_budget_tokens,
        ")"));
  }
  options.min_budget_tokens = params.offload_min_budget_tokens;
  return options;
}

pulse_sampling_params DefaultSamplingParams() {
  const SamplingParams sampling;
  pulse_sampling_params params{};
  params.struct_size = sizeof(params);
  params.temperature = sampling.temperature;
  params.top_p = sampling.top_p;
  params.min_p = sampling.min_p;
  params.repetition_penalty = sampling.repetition_penalty;
  params.top_k = sampling.top_k;
  params.max_tokens = sampling.max_tokens;
  params.ignore_eos = sampling.ignore_eos ? 1 : 0;
  params.seed = sampling.seed;
  params.stop_token_ids = nullptr;
  params.stop_token_count = 0;
  params.stop_strings = nullptr;
  params.stop_string_count = 0;
  params.offload_mode = PULSE_OFFLOAD_ENGINE;
  params.offload_budget_tokens = 0;
  params.offload_sink_tokens = -1;
  params.offload_window_tokens = -1;
  return params;
}

absl::StatusOr<RequestOffload> ToRequestOffload(const pulse_sampling_params& params) {
  RequestOffload offload;
  switch (params.offload_mode) {
    case PULSE_OFFLOAD_ENGINE:
      break;
    case PULSE_OFFLOAD_OFF:
      offload.mode = RequestOffload::Mode::kDense;
      break;
    case PULSE_OFFLOAD_SOLOHEAD:
      offload.mode = RequestOffload::Mode::kSoloHead;
      break;
    case PULSE_OFFLOAD_HEADWISE:
      offload.mode = RequestOffload::Mode::kHeadWise;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("pulse_sampling_params.offload_mode is ", params.offload_mode,
                       "; expected PULSE_OFFLOAD_ENGINE, _OFF, _HEADWISE or _SOLOHEAD"));
  }
  if (params.offload_budget_tokens < 0 || params.offload_sink_tokens < -1 ||
      params.offload_window_tokens < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pulse_sampling_params.offload_budget_tokens (", params.offload_budget_tokens,
        "), offload_sink_tokens (", params.offload_sink_tokens, ") and offload_window_tokens (",
        params.offload_window_tokens, "): 0 / -1 for the engine's, else sizes"));
  }
  if (params.offload_budget_tokens > 0) offload.budget_tokens = params.offload_budget_tokens;
  if (params.offload_sink_tokens >= 0) offload.sink_tokens = params.offload_sink_tokens;
  if (params.offload_window_tokens >= 0) offload.window_tokens = params.offload_window_tokens;
  return offload;
}

absl::StatusOr<SamplingParams> ToSamplingParams(const pulse_sampling_params& params) {
  if (params.stop_token_ids == nullptr && params.stop_token_count > 0) {
    return absl::InvalidArgumentError(absl::StrCat("pulse_sampling_params.stop_token_ids is NULL ",
                                                   "but stop_token_count is ",
                                                   params.stop_token_count));
  }
  if (params.stop_strings == nullptr && params.stop_string_count > 0) {
    return absl::InvalidArgumentError(absl::StrCat("pulse_sampling_params.stop_strings is NULL ",
                                                   "but stop_string_count is ",
                                                   params.stop_string_count));
  }
  SamplingParams sampling;
  for (size_t i = 0; i < params.stop_string_count; ++i) {
    if (params.stop_strings[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("pulse_sampling_params.stop_strings[", i, "] is NULL"));
    }
    sampling.stop_strings.emplace_back(params.stop_strings[i]);
  }
  sampling.temperature = params.temperature;
  sampling.top_k = params.top_k;
  sampling.top_p = params.top_p;
  sampling.min_p = params.min_p;
  sampling.repetition_penalty = params.repetition_penalty;
  sampling.seed = params.seed;
  sampling.max_tokens = params.max_tokens;
  if (params.stop_token_count > 0) {
    sampling.stop_token_ids.assign(params.stop_token_ids,
                                   params.stop_token_ids + params.stop_token_count);
  }
  sampling.ignore_eos = params.ignore_eos != 0;
  return sampling;
}

pulse_request_state ToPulseState(RequestState state) {
  switch (state) {
    case RequestState::kQueued:
      return PULSE_REQUEST_QUEUED;
    case RequestState::kRunning:
      return PULSE_REQUEST_RUNNING;
    case RequestState::kFinished:
      return PULSE_REQUEST_FINISHED;
  }
  return PULSE_REQUEST_FINISHED;
}

pulse_finish_reason ToPulseFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return PULSE_FINISH_NONE;
    case FinishReason::kMaxTokens:
      return PULSE_FINISH_MAX_TOKENS;
    case FinishReason::kStopToken:
      return PULSE_FINISH_STOP_TOKEN;
    case FinishReason::kContext:
      return PULSE_FINISH_CONTEXT;
    case FinishReason::kCancelled:
      return PULSE_FINISH_CANCELLED;
    case FinishReason::kCapacity:
      return PULSE_FINISH_CAPACITY;
    case FinishReason::kError:
      return PULSE_FINISH_ERROR;
    case FinishReason::kStopString:
      return PULSE_FINISH_STOP_STRING;
  }
  return PULSE_FINISH_ERROR;
}

}  // namespace pulse::capi
