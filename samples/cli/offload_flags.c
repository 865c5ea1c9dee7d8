#include "offload_flags.h"

#include <stdio.h>
#include <string.h>

static const char* const kPrecisions[] = {"f32", "bf16", "int8", "int4"};
static const int32_t kPrecisionCodes[] = {PULSE_SUMMARY_F32, PULSE_SUMMARY_BF16, PULSE_SUMMARY_INT8,
                                          PULSE_SUMMARY_INT4};
enum { kPrecisionCount = sizeof(kPrecisions) / sizeof(kPrecisions[0]) };

/* Sets *code to the code of `name` among the `count` names; 0 when it is none of them. */
static int find_code(const char* name, const char* const* names, const int32_t* codes, int count,
                     int32_t* code) {
  for (int i = 0; i < count; ++i) {
    if (strcmp(name, names[i]) == 0) {
      *code = codes[i];
      return 1;
    }
  }
  return 0;
}

void offload_flags_init(offload_flags* flags, flag_spec* specs) {
  pulse_engine_params defaults;
  pulse_engine_params_init(&defaults, sizeof(defaults));
  flags->mode = "off";
  flags->budget = defaults.offload_budget_tokens;
  flags->sink = defaults.offload_sink_tokens;
  flags->window = defaults.offload_window_tokens;
  flags->copy = "auto";
  flags->evict = "lru";
  flags->host_tokens = 0;
  flags->slot_tokens = 0;
  flags->summary_radius = (float)defaults.offload_summary_radius;
  flags->summary_boxes = defaults.offload_summary_boxes;
  flags->summary_precision = kPrecisions[0];
  for (int i = 0; i < kPrecisionCount; ++i) {
    if (kPrecisionCodes[i] == defaults.offload_summary_precision) {
      flags->summary_precision = kPrecisions[i];
    }
  }
  flags->block_tokens = defaults.block_tokens;
  flags->admission = defaults.offload_admission == PULSE_ADMIT_OFFLOAD_EVERY ? "every" : "adaptive";
  flags->micro_batches = defaults.micro_batches;
  flags->kv_tokens = 0;
  flags->prefill_chunk = defaults.prefill_chunk;
  flags->min_budget = defaults.offload_min_budget_tokens;
  flags->host_codec = defaults.offload_host_codec == PULSE_HOST_CODEC_FP8 ? "fp8" : "raw";
  flags->prefix_cache = defaults.offload_prefix_cache == 1 ? "on" : "off";
  const flag_spec own[kOffloadFlagCount] = {
      {"--offload", kFlagString, &flags->mode, 0, 0},
      {"--budget", kFlagInt32, &flags->budget, 1, 1 << 30},
      {"--sink", kFlagInt32, &flags->sink, 0, 1 << 30},
      {"--window", kFlagInt32, &flags->window, 0, 1 << 30},
      {"--copy", kFlagString, &flags->copy, 0, 0},
      {"--evict", kFlagString, &flags->evict, 0, 0},
      {"--host-tokens", kFlagInt32, &flags->host_tokens, 1, 1 << 30},
      {"--slot-tokens", kFlagInt32, &flags->slot_tokens, 1, 1 << 30},
      {"--summary-radius", kFlagFloat, &flags->summary_radius, 0, 1},
      {"--summary-boxes", kFlagInt32, &flags->summary_boxes, 0, 4096},
      {"--summary-precision", kFlagString, &flags->summary_precision, 0, 0},
      {"--block-tokens", kFlagInt32, &flags->block_tokens, 0, 4096},
      {"--admission", kFlagString, &flags->admission, 0, 0},
      {"--micro-batches", kFlagInt32, &flags->micro_batches, 0, 8},
      {"--kv-tokens", kFlagInt32, &flags->kv_tokens, 1, 1 << 30},
      {"--prefill-chunk", kFlagInt32, &flags->prefill_chunk, 1, 1 << 20},
      {"--min-budget", kFlagInt32, &flags->min_budget, 0, 1 << 30},
      {"--host-codec", kFlagString, &flags->host_codec, 0, 0},
      {"--prefix-cache", kFlagString, &flags->prefix_cache, 0, 0},
  };
  for (int i = 0; i < kOffloadFlagCount; ++i) specs[i] = own[i];
}

int offload_flags_apply(const offload_flags* flags, pulse_engine_params* params) {
  if (strcmp(flags->mode, "off") == 0) {
    params->offload_mode = PULSE_OFFLOAD_OFF;
  } else if (strcmp(flags->mode, "solohead") == 0) {
    params->offload_mode = PULSE_OFFLOAD_SOLOHEAD;
  } else if (strcmp(flags->mode, "headwise") == 0) {
    params->offload_mode = PULSE_OFFLOAD_HEADWISE;
  } else {
    fprintf(stderr, "pulseinfer: --offload expects off, solohead or headwise, got '%s'\n",
            flags->mode);
    return 0;
  }
  params->offload_budget_tokens = flags->budget;
  params->offload_sink_tokens = flags->sink;
  params->offload_window_tokens = flags->window;
  static const char* const kExecutors[] = {"auto", "gather", "batch-dma", "per-chunk"};
  static const int32_t kExecutorCodes[] = {PULSE_COPY_AUTO, PULSE_COPY_GATHER, PULSE_COPY_BATCH_DMA,
                                           PULSE_COPY_PER_CHUNK};
  if (!find_code(flags->copy, kExecutors, kExecutorCodes, 4, &params->offload_executor)) {
    fprintf(stderr, "pulseinfer: --copy expects auto, gather, batch-dma or per-chunk, got '%s'\n",
            flags->copy);
    return 0;
  }
  if (strcmp(flags->evict, "lru") == 0) {
    params->offload_eviction = PULSE_EVICT_LRU;
  } else if (strcmp(flags->evict, "score") == 0) {
    params->offload_eviction = PULSE_EVICT_SCORE;
  } else {
    fprintf(stderr, "pulseinfer: --evict expects lru or score, got '%s'\n", flags->evict);
    return 0;
  }
  if (!find_code(flags->summary_precision, kPrecisions, kPrecisionCodes, kPrecisionCount,
                 &params->offload_summary_precision)) {
    fprintf(stderr, "pulseinfer: --summary-precision expects f32, bf16, int8 or int4, got '%s'\n",
            flags->summary_precision);
    return 0;
  }
  static const char* const kAdmissions[] = {"adaptive", "every"};
  static const int32_t kAdmissionCodes[] = {PULSE_ADMIT_IO_ADAPTIVE, PULSE_ADMIT_OFFLOAD_EVERY};
  if (!find_code(flags->admission, kAdmissions, kAdmissionCodes, 2, &params->offload_admission)) {
    fprintf(stderr, "pulseinfer: --admission expects adaptive or every, got '%s'\n",
            flags->admission);
    return 0;
  }
  static const char* const kCodecs[] = {"raw", "fp8"};
  static const int32_t kCodecCodes[] = {PULSE_HOST_CODEC_RAW, PULSE_HOST_CODEC_FP8};
  if (!find_code(flags->host_codec, kCodecs, kCodecCodes, 2, &params->offload_host_codec)) {
    fprintf(stderr, "pulseinfer: --host-codec expects raw or fp8, got '%s'\n", flags->host_codec);
    return 0;
  }
  static const char* const kSettings[] = {"off", "on"};
  static const int32_t kSettingCodes[] = {0, 1};
  if (!find_code(flags->prefix_cache, kSettings, kSettingCodes, 2, &params->offload_prefix_cache)) {
    fprintf(stderr, "pulseinfer: --prefix-cache expects on or off, got '%s'\n",
            flags->prefix_cache);
    return 0;
  }
  params->offload_host_tokens = flags->host_tokens;
  params->offload_slot_tokens = flags->slot_tokens;
  params->offload_summary_radius = flags->summary_radius;
  params->offload_summary_boxes = flags->summary_boxes;
  params->block_tokens = flags->block_tokens;
  params->micro_batches = flags->micro_batches;
  params->kv_capacity_tokens = flags->kv_tokens;
  params->prefill_chunk = flags->prefill_chunk;
  params->offload_min_budget_tokens = flags->min_budget;
  return 1;
}

void print_offload_stats(pulse_engine* engine) {
  pulse_engine_stats stats;
  stats.struct_size = sizeof(stats);
  if (pulse_engine_stats_get(engine, &stats) != PULSE_OK) return;
  if (stats.admitted_resident + stats.admitted_offloaded > 0) {
    fprintf(stderr,
            "admission: %lld requests resident, %lld offloaded (%lld waits for recall); recall "
            "%.3f MB an offloaded row a step at %.2f GB/s, %.3f ms of compute a step\n",
            (long long)stats.admitted_resident, (long long)stats.admitted_offloaded,
            (long long)stats.admission_io_waits, stats.recall_mb_per_row, stats.link_gb_s,
            stats.step_compute_ms);
  }
  if (stats.lowered_budgets > 0) {
    fprintf(stderr, "admission: %lld requests run at a budget lowered to keep up with recall\n",
            (long long)stats.lowered_budgets);
  }
  if (stats.staged_requests > 0) {
    fprintf(stderr,
            "staged prefill: %lld prompts longer than the KV cache, %.2f MiB of earlier chunks "
            "recalled\n",
            (long long)stats.staged_requests, (double)stats.staged_recall_bytes / (1 << 20));
  }
  if (stats.prefix_hits > 0 || stats.host_blocks_cached > 0) {
    fprintf(stderr,
            "prefix cache: %lld requests started from cached blocks, %lld prompt tokens not "
            "prefilled; %d host-tier blocks cached\n",
            (long long)stats.prefix_hits, (long long)stats.prefix_hit_tokens,
            (int)stats.host_blocks_cached);
  }
  if (stats.split_steps > 0) {
    fprintf(stderr,
            "layer-wise scheduling: %lld decode steps split into micro-batches (%lld run whole to "
            "measure compute)\n",
            (long long)stats.split_steps, (long long)stats.probe_steps);
  }
  if (stats.sparse_selections == 0) return;
  const double attended =
      stats.sparse_context_tokens > 0
          ? 100.0 * (double)stats.sparse_attended_tokens / (double)stats.sparse_context_tokens
          : 0.0;
  const double reused =
      stats.sparse_picked_blocks > 0
          ? 100.0 * (double)stats.sparse_reused_blocks / (double)stats.sparse_picked_blocks
          : 0.0;
  fprintf(stderr,
          "sparse attention: %lld selections, %.1f%% of the context attended, %lld of %lld "
          "scored blocks picked, %.1f%% of them picked the step before too; planning %.3f ms on "
          "the host (%.3f ms a step)\n",
          (long long)stats.sparse_selections, attended, (long long)stats.sparse_picked_blocks,
          (long long)stats.sparse_candidate_blocks, reused, stats.selection_ms,
          stats.steps > 0 ? stats.selection_ms / (double)stats.steps : 0.0);
  const int64_t lookups = stats.slot_hits + stats.slot_misses;
  fprintf(stderr,
          "recall: %.2f MiB in %lld transfers over %lld plans, %.3f ms (%.3f ms a step); slot "
          "cache %.1f%% hits, %lld evictions; %.2f MiB written back\n",
          (double)stats.recall_bytes / (1 << 20), (long long)stats.recall_transfers,
          (long long)stats.recall_plans, stats.recall_ms,
          stats.steps > 0 ? stats.recall_ms / (double)stats.steps : 0.0,
          lookups > 0 ? 100.0 * (double)stats.slot_hits / (double)lookups : 0.0,
          (long long)stats.slot_evictions, (double)stats.writeback_bytes / (1 << 20));
}
