/* pulseinfer: the command-line front end of libpulseinfer, written against pulseinfer.h only. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "pulseinfer/pulseinfer.h"

static const char kUsage[] =
    "usage: pulseinfer COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  info        describe a model\n"
    "  generate    generate text after a prompt\n"
    "  chat        chat with a model through its chat template (stdin to stdout)\n"
    "  version     print the library version, ABI version and features\n"
    "\n"
    "`pulseinfer COMMAND --help` describes a command's options.\n";

static int command_version(void) {
  const uint64_t features = pulse_features();
  printf("libpulseinfer %s (ABI %d)\nfeatures:%s%s%s\n", pulse_version(), (int)pulse_abi_version(),
         (features & PULSE_FEATURE_CPU) ? " cpu" : "",
         (features & PULSE_FEATURE_CUDA_COMPILED) ? " cuda" : "",
         (features & PULSE_FEATURE_CUDA_DEVICE) ? " cuda-device" : "");
  return kExitOk;
}

int main(int argc, char** argv) {
  if (pulse_abi_version() != PULSE_ABI_VERSION) {
    fprintf(stderr, "pulseinfer: built for ABI %d but the library has ABI %d\n", PULSE_ABI_VERSION,
            (int)pulse_abi_version());
    return kExitFailure;
  }
  if (argc < 2) {
    fputs(kUsage, stderr);
    return kExitUsage;
  }
  const char* command = argv[1];
  if (strcmp(command, "info") == 0) return command_info(argc - 2, argv + 2);
  if (strcmp(command, "generate") == 0) return command_generate(argc - 2, argv + 2);
  if (strcmp(command, "chat") == 0) return command_chat(argc - 2, argv + 2);
  if (strcmp(command, "version") == 0 || strcmp(command, "--version") == 0) {
    return command_version();
  }
  if (strcmp(command, "help") == 0 || strcmp(command, "--help") == 0 ||
      strcmp(command, "-h") == 0) {
    fputs(kUsage, stdout);
    return kExitOk;
  }
  fprintf(stderr, "pulseinfer: unknown command '%s'\n\n%s", command, kUsage);
  return kExitUsage;
}
