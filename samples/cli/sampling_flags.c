#include "sampling_flags.h"

void sampling_flags_init(sampling_flags* flags, int32_t max_tokens, flag_spec* specs) {
  flags->max_tokens = max_tokens;
  flags->temperature = 0.0f;
  flags->top_k = 0;
  flags->top_p = 1.0f;
  flags->min_p = 0.0f;
  flags->repetition_penalty = 1.0f;
  flags->seed = 0;
  flags->ignore_eos = 0;
  flags->stop = NULL;
  const flag_spec own[kSamplingFlagCount] = {
      {"--max-tokens", kFlagInt32, &flags->max_tokens, 1, 1 << 24},
      {"--temperature", kFlagFloat, &flags->temperature, 0, 100},
      {"--top-k", kFlagInt32, &flags->top_k, 0, 1 << 24},
      {"--top-p", kFlagFloat, &flags->top_p, 0, 1},
      {"--min-p", kFlagFloat, &flags->min_p, 0, 1},
      {"--repetition-penalty", kFlagFloat, &flags->repetition_penalty, 0, 100},
      {"--seed", kFlagUint64, &flags->seed, 0, 0},
      {"--ignore-eos", kFlagSwitch, &flags->ignore_eos, 0, 0},
      {"--stop", kFlagString, &flags->stop, 0, 0},
  };
  for (int i = 0; i < kSamplingFlagCount; ++i) specs[i] = own[i];
}

void sampling_flags_apply(const sampling_flags* flags, const char** stop_storage,
                          pulse_sampling_params* params) {
  pulse_sampling_params_init(params, sizeof(*params));
  params->temperature = flags->temperature;
  params->top_k = flags->top_k;
  params->top_p = flags->top_p;
  params->min_p = flags->min_p;
  params->repetition_penalty = flags->repetition_penalty;
  params->seed = flags->seed;
  params->max_tokens = flags->max_tokens;
  params->ignore_eos = flags->ignore_eos;
  if (flags->stop != NULL && flags->stop[0] != '\0') {
    *stop_storage = flags->stop;
    params->stop_strings = stop_storage;
    params->stop_string_count = 1;
  }
}
