#include "model_flags.h"

#include <stdio.h>

#include "clock.h"

void model_flags_init(model_flags* flags, flag_spec* specs) {
  flags->path = NULL;
  flags->backend = "auto";
  flags->weight_type = "auto";
  flags->threads = 0;
  flags->random_weights = 0;
  flags->weight_seed = 0;
  flags->tensor_parallel = 0;
  const flag_spec model_specs[kModelFlagCount] = {
      {"--model", kFlagString, &flags->path, 0, 0},
      {"--random-weights", kFlagSwitch, &flags->random_weights, 0, 0},
      {"--weight-seed", kFlagUint64, &flags->weight_seed, 0, 0},
      {"--weight-type", kFlagString, &flags->weight_type, 0, 0},
      {"--backend", kFlagString, &flags->backend, 0, 0},
      {"--threads", kFlagInt32, &flags->threads, 0, 4096},
      {"--tensor-parallel", kFlagInt32, &flags->tensor_parallel, 0, 64},
  };
  for (int i = 0; i < kModelFlagCount; ++i) specs[i] = model_specs[i];
}

pulse_model* model_flags_load(const model_flags* flags, int quiet) {
  pulse_model_params params;
  pulse_model_params_init(&params, sizeof(params));
  params.backend = flags->backend;
  params.weight_type = flags->weight_type;
  params.threads = flags->threads;
  params.random_weights = flags->random_weights;
  params.random_seed = flags->weight_seed;
  params.tensor_parallel_size = flags->tensor_parallel;

  if (!quiet) fprintf(stderr, "loading %s ...\n", flags->path);
  const double start = clock_seconds();
  pulse_model* model = NULL;
  const pulse_status status = pulse_model_load(flags->path, &params, &model);
  if (status != PULSE_OK) {
    fprintf(stderr, "pulseinfer: cannot load the model (%s): %s\n", pulse_status_string(status),
            pulse_last_error());
    return NULL;
  }
  if (!quiet) fprintf(stderr, "loaded in %.2f s\n", clock_seconds() - start);
  return model;
}
