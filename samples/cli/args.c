#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* When `arg` is the flag `name`, or `name=value`, returns 1 and points *inline_value at the
 * value after '=' (NULL without one). */
static int matches(const char* arg, const char* name, const char** inline_value) {
  const size_t length = strlen(name);
  if (strncmp(arg, name, length) != 0) return 0;
  if (arg[length] == '\0') {
    *inline_value = NULL;
    return 1;
  }
  if (arg[length] != '=') return 0;
  *inline_value = arg + length + 1;
  return 1;
}

static int store_value(const char* command, const flag_spec* spec, const char* text) {
  char* end = NULL;
  errno = 0;
  switch (spec->kind) {
    case kFlagString:
      *(const char**)spec->target = text;
      return 1;
    case kFlagInt32: {
      const long long value = strtoll(text, &end, 10);
      if (end == text || *end != '\0' || errno != 0 || value < spec->min || value > spec->max) {
        fprintf(stderr, "%s: %s expects an integer in [%.0f, %.0f], got '%s'\n", command,
                spec->name, spec->min, spec->max, text);
        return 0;
      }
      *(int32_t*)spec->target = (int32_t)value;
      return 1;
    }
    case kFlagUint64: {
      const unsigned long long value = strtoull(text, &end, 10);
      if (end == text || *end != '\0' || errno != 0 || text[0] == '-') {
        fprintf(stderr, "%s: %s expects a non-negative integer, got '%s'\n", command, spec->name,
                text);
        return 0;
      }
      *(uint64_t*)spec->target = (uint64_t)value;
      return 1;
    }
    case kFlagFloat: {
      const double value = strtod(text, &end);
      if (end == text || *end != '\0' || errno != 0 || !isfinite(value) || value < spec->min ||
          value > spec->max) {
        fprintf(stderr, "%s: %s expects a number in [%g, %g], got '%s'\n", command, spec->name,
                spec->min, spec->max, text);
        return 0;
      }
      *(float*)spec->target = (float)value;
      return 1;
    }
    case kFlagSwitch:
      break;
  }
  return 0;
}

parse_result parse_flags(const char* command, int argc, char** argv, int first,
                         const flag_spec* specs, size_t spec_count) {
  int i = first;
  while (i < argc) {
    const char* arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return kParsedHelp;
    const flag_spec* spec = NULL;
    const char* value = NULL;
    for (size_t s = 0; s < spec_count && spec == NULL; ++s) {
      if (matches(arg, specs[s].name, &value)) spec = &specs[s];
    }
    if (spec == NULL) {
      fprintf(stderr, "%s: unknown argument '%s' (see %s --help)\n", command, arg, command);
      return kParsedBadUsage;
    }
    i += 1;
    if (spec->kind == kFlagSwitch) {
      if (value != NULL) {
        fprintf(stderr, "%s: %s takes no value\n", command, spec->name);
        return kParsedBadUsage;
      }
      *(int*)spec->target = 1;
      continue;
    }
    if (value == NULL) {
      if (i >= argc) {
        fprintf(stderr, "%s: %s needs a value (see %s --help)\n", command, spec->name, command);
        return kParsedBadUsage;
      }
      value = argv[i++];
    }
    if (!store_value(command, spec, value)) return kParsedBadUsage;
  }
  return kParsedFlags;
}

static int is_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; }

int parse_token_ids(const char* flag, const char* text, int32_t** out, size_t* count) {
  size_t capacity = 0;
  size_t size = 0;
  int32_t* ids = NULL;
  const char* p = text;
  for (;;) {
    while (is_separator(*p)) ++p;
    if (*p == '\0') break;
    char* end = NULL;
    errno = 0;
    const long long value = strtoll(p, &end, 10);
    if (end == p || (*end != '\0' && !is_separator(*end)) || errno != 0 || value < 0 ||
        value > INT32_MAX) {
      fprintf(stderr, "pulseinfer: %s expects token ids like 1,2,3, got '%s'\n", flag, text);
      free(ids);
      return 0;
    }
    if (size == capacity) {
      capacity = capacity == 0 ? 64 : 2 * capacity;
      int32_t* grown = (int32_t*)realloc(ids, capacity * sizeof(*ids));
      if (grown == NULL) {
        fprintf(stderr, "pulseinfer: out of memory reading %s\n", flag);
        free(ids);
        return 0;
      }
      ids = grown;
    }
    ids[size++] = (int32_t)value;
    p = end;
  }
  if (size == 0) {
    fprintf(stderr, "pulseinfer: %s has no token ids\n", flag);
    return 0;
  }
  *out = ids;
  *count = size;
  return 1;
}
