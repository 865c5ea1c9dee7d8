/* Hand-written, table-driven flag parsing for the pulseinfer command: `--name value`,
 * `--name=value`, or `--name` for a switch. Errors are printed to stderr. */
#ifndef PULSEINFER_CLI_ARGS_H_
#define PULSEINFER_CLI_ARGS_H_

#include <stddef.h>
#include <stdint.h>

/* The exit codes of the command. */
enum { kExitOk = 0, kExitFailure = 1, kExitUsage = 2 };

typedef enum { kFlagString, kFlagSwitch, kFlagInt32, kFlagUint64, kFlagFloat } flag_kind;

typedef struct flag_spec {
  const char* name; /* "--max-tokens" */
  flag_kind kind;
  void* target; /* const char**, int*, int32_t*, uint64_t*, float* by kind */
  double min;   /* the accepted range of kFlagInt32 and kFlagFloat values */
  double max;
} flag_spec;

typedef enum { kParsedFlags, kParsedHelp, kParsedBadUsage } parse_result;

/* Parses argv[first..argc) against `specs`, writing each value to its target. kParsedHelp as
 * soon as --help or -h appears; kParsedBadUsage (after printing why, prefixed by `command`) for
 * an unknown flag, a missing value or a value out of range. */
parse_result parse_flags(const char* command, int argc, char** argv, int first,
                         const flag_spec* specs, size_t spec_count);

/* Token ids separated by commas and/or spaces, e.g. "1,2, 3". On success *out is malloc'ed
 * (free it) and 1 is returned; 0 after printing why. */
int parse_token_ids(const char* flag, const char* text, int32_t** out, size_t* count);

#endif /* PULSEINFER_CLI_ARGS_H_ */
