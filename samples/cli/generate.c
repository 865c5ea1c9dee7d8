/* pulseinfer generate: one request through the engine, its tokens streamed to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "clock.h"
#include "commands.h"
#include "model_flags.h"

static const char kGenerateHelp[] =
    "usage: pulseinfer generate --model PATH (--prompt-ids IDS | --prompt TEXT) [options]\n"
    "Generates tokens after a prompt and streams them to stdout as they come.\n"
    "\n"
    "options:\n" MODEL_FLAGS_HELP
    "  --prompt-ids IDS      the prompt as token ids: 1,2,3 or \"1 2 3\"\n"
    "  --prompt TEXT         the prompt as text (needs the tokenizer: not in this build yet)\n"
    "  --max-tokens N        tokens to generate (default 64)\n"
    "  --temperature T       0 is greedy (default 0)\n"
    "  --top-k K             keep the K most likely tokens, 0 for all (default 0)\n"
    "  --top-p P             nucleus sampling, 1 is off (default 1)\n"
    "  --min-p P             drop tokens below P times the top one, 0 is off (default 0)\n"
    "  --repetition-penalty R  1 is off (default 1)\n"
    "  --seed S              sampling seed (default 0)\n"
    "  --ignore-eos          do not stop at the model's end-of-sequence tokens\n"
    "  --format F            ids (comma-separated), text, or json (one object at the end)\n"
    "                        (default ids; text prints ids until the tokenizer lands)\n"
    "  --quiet               no progress on stderr\n"
    "  --help                this message\n";

typedef enum { kFormatIds, kFormatText, kFormatJson } output_format;

typedef struct generate_flags {
  model_flags model;
  const char* prompt;
  const char* prompt_ids;
  const char* format;
  int32_t max_tokens;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  float repetition_penalty;
  uint64_t seed;
  int ignore_eos;
  int quiet;
} generate_flags;

enum { kGenerateFlagCount = kModelFlagCount + 12 };

static void generate_flags_init(generate_flags* flags, flag_spec* specs) {
  model_flags_init(&flags->model, specs);
  flags->prompt = NULL;
  flags->prompt_ids = NULL;
  flags->format = "ids";
  flags->max_tokens = 64;
  flags->temperature = 0.0f;
  flags->top_k = 0;
  flags->top_p = 1.0f;
  flags->min_p = 0.0f;
  flags->repetition_penalty = 1.0f;
  flags->seed = 0;
  flags->ignore_eos = 0;
  flags->quiet = 0;
  const flag_spec own[kGenerateFlagCount - kModelFlagCount] = {
      {"--prompt-ids", kFlagString, &flags->prompt_ids, 0, 0},
      {"--prompt", kFlagString, &flags->prompt, 0, 0},
      {"--max-tokens", kFlagInt32, &flags->max_tokens, 1, 1 << 24},
      {"--temperature", kFlagFloat, &flags->temperature, 0, 100},
      {"--top-k", kFlagInt32, &flags->top_k, 0, 1 << 24},
      {"--top-p", kFlagFloat, &flags->top_p, 0, 1},
      {"--min-p", kFlagFloat, &flags->min_p, 0, 1},
      {"--repetition-penalty", kFlagFloat, &flags->repetition_penalty, 0, 100},
      {"--seed", kFlagUint64, &flags->seed, 0, 0},
      {"--ignore-eos", kFlagSwitch, &flags->ignore_eos, 0, 0},
      {"--format", kFlagString, &flags->format, 0, 0},
      {"--quiet", kFlagSwitch, &flags->quiet, 0, 0},
  };
  for (int i = 0; i < kGenerateFlagCount - kModelFlagCount; ++i)
    specs[kModelFlagCount + i] = own[i];
}

static int parse_format(const char* name, output_format* format) {
  if (strcmp(name, "ids") == 0) {
    *format = kFormatIds;
  } else if (strcmp(name, "text") == 0) {
    *format = kFormatText;
  } else if (strcmp(name, "json") == 0) {
    *format = kFormatJson;
  } else {
    fprintf(stderr, "pulseinfer generate: --format expects ids, text or json, got '%s'\n", name);
    return 0;
  }
  return 1;
}

/* Streams each token to stdout as it comes (not for json, which prints once at the end). The
 * first token also ends the prefill, which is reported then, before the token appears. */
typedef struct token_stream {
  output_format format;
  int quiet;
  size_t prompt_tokens;
  int32_t printed;
} token_stream;

static int on_token(void* user_data, const pulse_token_event* event) {
  token_stream* stream = (token_stream*)user_data;
  if (event->index == 0 && !stream->quiet) {
    fprintf(stderr, "prefill %zu/%zu tokens\n", stream->prompt_tokens, stream->prompt_tokens);
  }
  if (stream->format == kFormatJson) return 0;
  const char* separator = stream->printed == 0 ? "" : stream->format == kFormatIds ? "," : " ";
  printf("%s%d", separator, (int)event->token);
  fflush(stdout);
  stream->printed += 1;
  return 0;
}

static void print_json(const int32_t* tokens, size_t count, const pulse_request_stats* stats) {
  printf("{\"prompt_tokens\": %d, \"tokens\": [", (int)stats->prompt_tokens);
  for (size_t i = 0; i < count; ++i) printf("%s%d", i == 0 ? "" : ", ", (int)tokens[i]);
  printf("], \"generated_tokens\": %d, \"finish_reason\": \"%s\", ", (int)stats->generated_tokens,
         pulse_finish_reason_string(stats->finish_reason));
  printf("\"queue_ms\": %.3f, \"ttft_ms\": %.3f, \"tpot_ms\": %.3f, \"total_ms\": %.3f}\n",
         stats->queue_ms, stats->ttft_ms, stats->tpot_ms, stats->total_ms);
}

/* An engine sized for this one request: its KV cache holds exactly its context. */
static pulse_engine* create_engine(pulse_model* model, size_t prompt_tokens, int32_t max_tokens) {
  pulse_model_info info;
  info.struct_size = sizeof(info);
  pulse_engine_params params;
  pulse_engine_params_init(&params, sizeof(params));
  pulse_status status = pulse_model_info_get(model, &info);
  if (status == PULSE_OK) {
    size_t context = prompt_tokens + (size_t)max_tokens;
    if (context > (size_t)info.context_length) context = (size_t)info.context_length;
    const size_t block = (size_t)params.block_tokens;
    params.max_batch = 1;
    params.max_context = (int32_t)context;
    params.kv_capacity_tokens = (int64_t)((context + block - 1) / block * block);
    pulse_engine* engine = NULL;
    status = pulse_engine_create(model, &params, &engine);
    if (status == PULSE_OK) return engine;
  }
  fprintf(stderr, "pulseinfer: cannot create the engine (%s): %s\n", pulse_status_string(status),
          pulse_last_error());
  return NULL;
}

/* Steps until the request finished, reporting the prefill chunks before the last on stderr. */
static int run_to_completion(pulse_engine* engine, size_t prompt_tokens, int quiet) {
  pulse_step_report report;
  report.struct_size = sizeof(report);
  size_t prefilled = 0;
  do {
    const pulse_status status = pulse_engine_step(engine, &report);
    if (status != PULSE_OK) {
      fprintf(stderr, "\npulseinfer: step failed (%s): %s\n", pulse_status_string(status),
              pulse_last_error());
      return 0;
    }
    prefilled += (size_t)report.prefill_tokens;
    if (!quiet && report.prefill_tokens > 0 && prefilled < prompt_tokens) {
      fprintf(stderr, "prefill %zu/%zu tokens\n", prefilled, prompt_tokens);
    }
  } while (report.pending > 0);
  return 1;
}

/* Prints the result (json) or ends the streamed line, and the summary on stderr. */
static int finish(pulse_engine* engine, uint64_t id, output_format format, int quiet,
                  double seconds) {
  pulse_request_stats stats;
  stats.struct_size = sizeof(stats);
  size_t count = 0;
  pulse_status status = pulse_request_result(engine, id, NULL, 0, &count);
  int32_t* tokens = (int32_t*)malloc((count > 0 ? count : 1) * sizeof(*tokens));
  if (tokens == NULL) {
    fputs("pulseinfer: out of memory\n", stderr);
    return kExitFailure;
  }
  status = pulse_request_result(engine, id, tokens, count, &count);
  const pulse_status stats_status = pulse_request_stats_get(engine, id, &stats);
  if (format != kFormatJson) {
    putchar('\n');
    fflush(stdout); /* before the summary on (unbuffered) stderr */
  }
  if (status != PULSE_OK || stats_status != PULSE_OK) {
    fprintf(stderr, "pulseinfer: generation failed (%s): %s\n", pulse_status_string(status),
            pulse_last_error());
    free(tokens);
    return kExitFailure;
  }
  if (format == kFormatJson) print_json(tokens, count, &stats);
  if (!quiet) {
    fprintf(stderr,
            "%d tokens in %.2f s: time to first token %.1f ms, %.1f ms per token after it; "
            "finished: %s\n",
            (int)stats.generated_tokens, seconds, stats.ttft_ms, stats.tpot_ms,
            pulse_finish_reason_string(stats.finish_reason));
  }
  free(tokens);
  return kExitOk;
}

static int generate(const generate_flags* flags, output_format format, const int32_t* prompt,
                    size_t prompt_count) {
  pulse_model* model = model_flags_load(&flags->model, flags->quiet);
  if (model == NULL) return kExitFailure;
  pulse_engine* engine = create_engine(model, prompt_count, flags->max_tokens);
  pulse_model_free(model); /* the engine holds its own reference */
  if (engine == NULL) return kExitFailure;

  pulse_sampling_params sampling;
  pulse_sampling_params_init(&sampling, sizeof(sampling));
  sampling.temperature = flags->temperature;
  sampling.top_k = flags->top_k;
  sampling.top_p = flags->top_p;
  sampling.min_p = flags->min_p;
  sampling.repetition_penalty = flags->repetition_penalty;
  sampling.seed = flags->seed;
  sampling.max_tokens = flags->max_tokens;
  sampling.ignore_eos = flags->ignore_eos;

  token_stream stream = {format, flags->quiet, prompt_count, 0};
  uint64_t id = 0;
  const double start = clock_seconds();
  const pulse_status status =
      pulse_request_submit(engine, prompt, prompt_count, &sampling, on_token, &stream, &id);
  if (status != PULSE_OK) {
    fprintf(stderr, "pulseinfer: cannot submit the prompt (%s): %s\n", pulse_status_string(status),
            pulse_last_error());
    pulse_engine_free(engine);
    return kExitFailure;
  }
  int exit_code = kExitFailure;
  if (run_to_completion(engine, prompt_count, flags->quiet)) {
    exit_code = finish(engine, id, format, flags->quiet, clock_seconds() - start);
  }
  pulse_engine_free(engine);
  return exit_code;
}

int command_generate(int argc, char** argv) {
  generate_flags flags;
  flag_spec specs[kGenerateFlagCount];
  generate_flags_init(&flags, specs);
  switch (parse_flags("pulseinfer generate", argc, argv, 0, specs, kGenerateFlagCount)) {
    case kParsedHelp:
      fputs(kGenerateHelp, stdout);
      return kExitOk;
    case kParsedBadUsage:
      return kExitUsage;
    case kParsedFlags:
      break;
  }
  output_format format;
  if (!parse_format(flags.format, &format)) return kExitUsage;
  if (flags.model.path == NULL) {
    fputs("pulseinfer generate: --model is required (see pulseinfer generate --help)\n", stderr);
    return kExitUsage;
  }
  if (flags.prompt != NULL) {
    fputs(
        "pulseinfer generate: --prompt TEXT needs the tokenizer, which this build does not have "
        "yet; pass the prompt's token ids with --prompt-ids\n",
        stderr);
    return kExitUsage;
  }
  if (flags.prompt_ids == NULL) {
    fputs("pulseinfer generate: give the prompt with --prompt-ids (see --help)\n", stderr);
    return kExitUsage;
  }
  int32_t* prompt = NULL;
  size_t prompt_count = 0;
  if (!parse_token_ids("--prompt-ids", flags.prompt_ids, &prompt, &prompt_count)) {
    return kExitUsage;
  }
  if (format == kFormatText && !flags.quiet) {
    fputs("note: text output needs the tokenizer (not in this build yet); printing token ids\n",
          stderr);
  }
  const int exit_code = generate(&flags, format, prompt, prompt_count);
  free(prompt);
  return exit_code;
}
