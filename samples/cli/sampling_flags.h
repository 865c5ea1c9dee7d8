/* The flags that set how tokens are sampled, shared by generate and chat. */
#ifndef PULSEINFER_CLI_SAMPLING_FLAGS_H_
#define PULSEINFER_CLI_SAMPLING_FLAGS_H_

#include <stdint.h>

#include "args.h"
#include "pulseinfer/pulseinfer.h"

typedef struct sampling_flags {
  int32_t max_tokens;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  float repetition_penalty;
  uint64_t seed;
  int ignore_eos;
  const char* stop; /* one stop string, or NULL */
} sampling_flags;

enum { kSamplingFlagCount = 9 };

#define SAMPLING_FLAGS_HELP                                                               \
  "  --max-tokens N        tokens to generate (default %d)\n"                             \
  "  --temperature T       0 is greedy (default 0)\n"                                     \
  "  --top-k K             keep the K most likely tokens, 0 for all (default 0)\n"        \
  "  --top-p P             nucleus sampling, 1 is off (default 1)\n"                      \
  "  --min-p P             drop tokens below P times the top one, 0 is off (default 0)\n" \
  "  --repetition-penalty R  1 is off (default 1)\n"                                      \
  "  --seed S              sampling seed (default 0)\n"                                   \
  "  --ignore-eos          do not stop at the model's end-of-sequence tokens\n"           \
  "  --stop TEXT           stop when the text contains TEXT (not printed)\n"

/* Sets the defaults (greedy, `max_tokens`) and writes the kSamplingFlagCount specs to `specs`. */
void sampling_flags_init(sampling_flags* flags, int32_t max_tokens, flag_spec* specs);
/* The sampling parameters the flags say; `stop_storage` backs the stop-string array and must
 * live as long as `params` is used. */
void sampling_flags_apply(const sampling_flags* flags, const char** stop_storage,
                          pulse_sampling_params* params);

#endif /* PULSEINFER_CLI_SAMPLING_FLAGS_H_ */
