/* The flags of sparse decode attention (pulse_engine_params.offload_*, block_tokens, and the KV
 * cache's size and prefill chunk that offloading is about) and its statistics. */
#ifndef PULSEINFER_CLI_OFFLOAD_FLAGS_H_
#define PULSEINFER_CLI_OFFLOAD_FLAGS_H_

#include <stdint.h>

#include "args.h"
#include "pulseinfer/pulseinfer.h"

typedef struct offload_flags {
  const char* mode; /* "off", "headwise" or "solohead" */
  int32_t budget;
  int32_t sink;
  int32_t window;
  const char* copy;  /* "auto", "gather", "batch-dma" or "per-chunk" */
  const char* evict; /* "lru" or "score" */
  int32_t host_tokens;
  int32_t slot_tokens;
  float summary_radius;
  int32_t summary_boxes;
  const char* summary_precision; /* "f32", "bf16", "int8" or "int4" */
  int32_t block_tokens;
  const char* admission; /* "adaptive" or "every" */
  int32_t micro_batches; /* 0: chosen each step */
  int32_t kv_tokens;     /* 0: the library's default */
  int32_t prefill_chunk;
  int32_t min_budget;       /* 0: budgets are never lowered */
  const char* host_codec;   /* "raw" or "fp8" */
  const char* prefix_cache; /* "on" or "off" */
} offload_flags;

enum { kOffloadFlagCount = 19 };

/* A printf format of the library's defaults, as offload_flags_init sets them: pass
 * OFFLOAD_FLAGS_HELP_ARGS(flags). */
#define OFFLOAD_FLAGS_HELP                                                                       \
  "  --offload MODE        sparse decode attention: off (default), solohead (one block set a\n"  \
  "                        layer for all KV heads) or headwise (one a KV head)\n"                \
  "  --budget N            tokens a decode step attends to at most (default %d)\n"               \
  "  --sink N              first tokens always attended (default %d)\n"                          \
  "  --window N            last tokens always attended (default %d)\n"                           \
  "  --copy EXECUTOR       how recalled blocks move: auto (default), gather, batch-dma or\n"     \
  "                        per-chunk\n"                                                          \
  "  --evict POLICY        which cached block a recall displaces: lru (default) or score\n"      \
  "  --host-tokens N       host-tier capacity in tokens (default: the context)\n"                \
  "  --slot-tokens N       device-tier slots in tokens (default: the budget)\n"                  \
  "  --summary-radius R    how blocks score, in [0, 1]: 1 Quest's upper bound of q.k, 0 the\n"   \
  "                        q.k of the key range's center (default %g)\n"                         \
  "  --summary-boxes N     boxes of consecutive tokens a block's key summary keeps, a block\n"   \
  "                        scored as its best box: 1 one a block (Quest's), 0 one a token\n"     \
  "                        (every key exactly), else a divisor of --block-tokens\n"              \
  "                        (default %d)\n"                                                       \
  "  --summary-precision P summaries as stored: f32, bf16, int8 or int4 (default %s)\n"          \
  "  --block-tokens N      tokens of one KV block, the unit a selection picks and a recall\n"    \
  "                        moves (default 0: %d with --offload, %d without)\n"                   \
  "  --admission A         which requests are offloaded: adaptive (default: those that do\n"     \
  "                        not fit the KV cache, while recall keeps up) or every\n"              \
  "  --micro-batches N     micro-batches a decode step runs as, one's recall landing while\n"    \
  "                        another computes: 0 (default) chosen each step, 1 to 8 fixed\n"       \
  "  --kv-tokens N         KV cache capacity in tokens (default: the library's); an offloaded\n" \
  "                        prompt it cannot hold is prefilled staged from the host tier\n"       \
  "  --prefill-chunk N     prompt tokens of one request in one step (default %d)\n"              \
  "  --min-budget N        with --admission adaptive, the least budget a request may get\n"      \
  "                        rather than wait for recall (default 0: never lowered)\n"             \
  "  --host-codec C        how the host tier stores blocks: raw (default) or fp8 (a scale a\n"   \
  "                        KV head's keys or values; fewer bytes held and recalled)\n"           \
  "  --prefix-cache S      on: prompts' full blocks stay in the host tier, shared by\n"          \
  "                        later prompts that start with them (their prefill skipped); off\n"    \
  "                        (default)\n"
#define OFFLOAD_FLAGS_HELP_ARGS(flags)                                                         \
  (int)(flags).budget, (int)(flags).sink, (int)(flags).window, (double)(flags).summary_radius, \
      (int)(flags).summary_boxes, (flags).summary_precision, PULSE_OFFLOAD_BLOCK_TOKENS,       \
      PULSE_DENSE_BLOCK_TOKENS, (int)(flags).prefill_chunk

/* Sets the defaults (the library's) and writes the kOffloadFlagCount specs to `specs`. */
void offload_flags_init(offload_flags* flags, flag_spec* specs);
/* Writes the flags into `params`; 0 (after printing why) for an unknown mode, executor, eviction
 * policy, summary precision, admission, host codec or prefix-cache setting. */
int offload_flags_apply(const offload_flags* flags, pulse_engine_params* params);
/* Prints on stderr where an offloading `engine` placed its requests, and its sparse attention
 * and recall statistics when it attended sparsely. */
void print_offload_stats(pulse_engine* engine);

#endif /* PULSEINFER_CLI_OFFLOAD_FLAGS_H_ */
