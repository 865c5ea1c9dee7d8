/* pulseinfer info: what a model is, one "name: value" line each. */
#include <stdio.h>

#include "args.h"
#include "commands.h"
#include "model_flags.h"

static const char kInfoHelp[] =
    "usage: pulseinfer info --model PATH [options]\n"
    "Prints the model's architecture, shapes, parameter count, format and weight types.\n"
    "\n"
    "options:\n" MODEL_FLAGS_HELP
    "  --quiet               no progress on stderr\n"
    "  --help                this message\n";

int command_info(int argc, char** argv) {
  model_flags flags;
  int quiet = 0;
  flag_spec specs[kModelFlagCount + 1];
  model_flags_init(&flags, specs);
  specs[kModelFlagCount] = (flag_spec){"--quiet", kFlagSwitch, &quiet, 0, 0};

  switch (parse_flags("pulseinfer info", argc, argv, 0, specs, sizeof(specs) / sizeof(specs[0]))) {
    case kParsedHelp:
      fputs(kInfoHelp, stdout);
      return kExitOk;
    case kParsedBadUsage:
      return kExitUsage;
    case kParsedFlags:
      break;
  }
  if (flags.path == NULL) {
    fputs("pulseinfer info: --model is required (see pulseinfer info --help)\n", stderr);
    return kExitUsage;
  }

  pulse_model* model = model_flags_load(&flags, quiet);
  if (model == NULL) return kExitFailure;
  pulse_model_info info;
  info.struct_size = sizeof(info);
  const pulse_status status = pulse_model_info_get(model, &info);
  if (status != PULSE_OK) {
    fprintf(stderr, "pulseinfer: %s\n", pulse_last_error());
    pulse_model_free(model);
    return kExitFailure;
  }
  printf("architecture: %s\n", info.architecture);
  printf("format: %s\n", info.format);
  printf("stored type: %s\n", info.stored_type);
  printf("layers: %d\n", (int)info.num_layers);
  printf("hidden size: %d\n", (int)info.hidden_size);
  printf("intermediate size: %d\n", (int)info.intermediate_size);
  printf("heads: %d\n", (int)info.num_heads);
  printf("kv heads: %d\n", (int)info.num_kv_heads);
  printf("head dim: %d\n", (int)info.head_dim);
  printf("vocab: %d\n", (int)info.vocab_size);
  printf("context: %d\n", (int)info.context_length);
  printf("tied embeddings: %s\n", info.tie_word_embeddings ? "yes" : "no");
  printf("parameters: %lld\n", (long long)info.parameter_count);
  printf("weight type: %s\n", info.weight_type);
  printf("backend: %s\n", info.backend);
  printf("ranks: %d\n", (int)info.tensor_parallel_size);
  printf("tokenizer: %s\n", info.tokenizer[0] != '\0' ? info.tokenizer : "none");
  printf("chat template: %s\n", info.chat_template[0] != '\0' ? info.chat_template : "none");
  pulse_model_free(model);
  return kExitOk;
}
