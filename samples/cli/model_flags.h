/* The flags that choose and load a model, shared by every command. */
#ifndef PULSEINFER_CLI_MODEL_FLAGS_H_
#define PULSEINFER_CLI_MODEL_FLAGS_H_

#include <stdint.h>

#include "args.h"
#include "pulseinfer/pulseinfer.h"

typedef struct model_flags {
  const char* path;
  const char* backend;
  const char* weight_type;
  int32_t threads;
  int random_weights;
  uint64_t weight_seed;
  int32_t tensor_parallel;
} model_flags;

enum { kModelFlagCount = 7 };

#define MODEL_FLAGS_HELP                                                                        \
  "  --model PATH          a GGUF file or a Hugging Face directory (required)\n"                \
  "  --random-weights      PATH is a config.json: load seeded random weights at its shapes\n"   \
  "  --weight-seed N       seed of the random weights (default 0)\n"                            \
  "  --weight-type T       auto, f32, bf16 or quantized (default auto: quantized on the CPU)\n" \
  "  --backend B           auto, cpu or cuda (default auto)\n"                                  \
  "  --threads N           CPU threads, 0 for one per core (default 0)\n"                       \
  "  --tensor-parallel N   split the model over N ranks (CPU: threads/N threads each)\n"

/* Sets the defaults and writes the kModelFlagCount flag specs that fill `flags` to `specs`. */
void model_flags_init(model_flags* flags, flag_spec* specs);
/* Loads the model, with progress on stderr unless `quiet`. On failure prints the library's
 * error and returns NULL. */
pulse_model* model_flags_load(const model_flags* flags, int quiet);

#endif /* PULSEINFER_CLI_MODEL_FLAGS_H_ */
