/* pulseinfer generate: one request through the engine, its text (or tokens) streamed to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "clock.h"
#include "commands.h"
#include "engine_run.h"
#include "model_flags.h"
#include "offload_flags.h"
#include "sampling_flags.h"

enum { kDefaultMaxTokens = 64 };

static const char kGenerateHelp[] =
    "usage: pulseinfer generate --model PATH (--prompt TEXT | --prompt-ids IDS) [options]\n"
    "Generates after a prompt and streams the text (or the token ids) to stdout as it comes.\n"
    "\n"
    "options:\n" MODEL_FLAGS_HELP
    "  --prompt TEXT         the prompt as text, encoded with the model's tokenizer\n"
    "  --chat                TEXT is a user message: format it with the model's chat template\n"
    "  --system TEXT         with --chat: a system message before it\n"
    "  --prompt-ids IDS      the prompt as token ids: 1,2,3 or \"1 2 3\"\n" SAMPLING_FLAGS_HELP;
/* After OFFLOAD_FLAGS_HELP: one string would pass the 4095 characters C requires compilers to
 * take. */
static const char kGenerateHelpEnd[] =
    "  --format F            text, ids (comma-separated) or json (one object at the end)\n"
    "                        (default text; ids for a model without a tokenizer)\n"
    "  --quiet               no progress on stderr\n"
    "  --help                this message\n";

typedef enum { kFormatIds, kFormatText, kFormatJson } output_format;

typedef struct generate_flags {
  model_flags model;
  sampling_flags sampling;
  offload_flags offload;
  const char* prompt;
  const char* prompt_ids;
  const char* system;
  const char* format;
  int chat;
  int quiet;
} generate_flags;

enum { kOwnFlagCount = 6 };
enum {
  kGenerateFlagCount = kModelFlagCount + kSamplingFlagCount + kOffloadFlagCount + kOwnFlagCount
};

static void generate_flags_init(generate_flags* flags, flag_spec* specs) {
  model_flags_init(&flags->model, specs);
  sampling_flags_init(&flags->sampling, kDefaultMaxTokens, specs + kModelFlagCount);
  offload_flags_init(&flags->offload, specs + kModelFlagCount + kSamplingFlagCount);
  flags->prompt = NULL;
  flags->prompt_ids = NULL;
  flags->system = NULL;
  flags->format = "text";
  flags->chat = 0;
  flags->quiet = 0;
  const flag_spec own[kOwnFlagCount] = {
      {"--prompt-ids", kFlagString, &flags->prompt_ids, 0, 0},
      {"--prompt", kFlagString, &flags->prompt, 0, 0},
      {"--system", kFlagString, &flags->system, 0, 0},
      {"--chat", kFlagSwitch, &flags->chat, 0, 0},
      {"--format", kFlagString, &flags->format, 0, 0},
      {"--quiet", kFlagSwitch, &flags->quiet, 0, 0},
  };
  for (int i = 0; i < kOwnFlagCount; ++i) {
    specs[kModelFlagCount + kSamplingFlagCount + kOffloadFlagCount + i] = own[i];
  }
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
  if (stream->format == kFormatText) {
    fwrite(event->text, 1, event->text_len, stdout);
  } else {
    printf("%s%d", stream->printed == 0 ? "" : ",", (int)event->token);
  }
  fflush(stdout);
  stream->printed += 1;
  return 0;
}

static void print_json(pulse_engine* engine, uint64_t id, const int32_t* tokens, size_t count,
                       const pulse_request_stats* stats) {
  printf("{\"prompt_tokens\": %d, \"tokens\": [", (int)stats->prompt_tokens);
  for (size_t i = 0; i < count; ++i) printf("%s%d", i == 0 ? "" : ", ", (int)tokens[i]);
  printf("], ");
  size_t text_len = 0;
  char* text = copy_request_text(engine, id, &text_len);
  if (text != NULL) {
    fputs("\"text\": ", stdout);
    print_json_string(text, text_len);
    fputs(", ", stdout);
    free(text);
  }
  printf("\"generated_tokens\": %d, \"finish_reason\": \"%s\", ", (int)stats->generated_tokens,
         pulse_finish_reason_string(stats->finish_reason));
  printf("\"queue_ms\": %.3f, \"ttft_ms\": %.3f, \"tpot_ms\": %.3f, \"total_ms\": %.3f}\n",
         stats->queue_ms, stats->ttft_ms, stats->tpot_ms, stats->total_ms);
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
  if (format == kFormatJson) print_json(engine, id, tokens, count, &stats);
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

/* The prompt as text: the flag itself, or a user (and system) message through the chat
 * template. Returns a malloc'ed string (free it) with its length, or NULL after printing why. */
static char* prompt_text(const pulse_model* model, const generate_flags* flags, size_t* len) {
  if (!flags->chat) {
    *len = strlen(flags->prompt);
    char* copy = (char*)malloc(*len + 1);
    if (copy != NULL) memcpy(copy, flags->prompt, *len + 1);
    return copy;
  }
  pulse_chat_message messages[2];
  size_t count = 0;
  if (flags->system != NULL) messages[count++] = (pulse_chat_message){"system", flags->system};
  messages[count++] = (pulse_chat_message){"user", flags->prompt};
  return copy_chat_prompt(model, messages, count, len, "pulseinfer");
}

/* The prompt to submit: token ids, or text the library encodes with `tokenize_flags`. */
typedef struct prompt {
  const int32_t* ids;
  char* text;    /* malloc'ed */
  size_t length; /* ids, or bytes of text */
  uint32_t tokenize_flags;
  size_t tokens;
} prompt;

/* Builds the text prompt and counts its tokens. Returns 1, or 0 after printing why. */
static int prepare_text(const pulse_model* model, const generate_flags* flags, prompt* out) {
  out->text = prompt_text(model, flags, &out->length);
  if (out->text == NULL) return 0;
  /* Templated text already holds the template's BOS text. */
  out->tokenize_flags = flags->chat ? PULSE_TOKENIZE_PARSE_SPECIAL : PULSE_TOKENIZE_DEFAULT;
  const pulse_status status =
      pulse_tokenize(model, out->text, out->length, out->tokenize_flags, NULL, 0, &out->tokens);
  if (status == PULSE_OK || status == PULSE_BUFFER_TOO_SMALL) return 1;
  fprintf(stderr, "pulseinfer: cannot tokenize the prompt (%s): %s\n", pulse_status_string(status),
          pulse_last_error());
  return 0;
}

static int submit(pulse_engine* engine, const prompt* input, const pulse_sampling_params* sampling,
                  token_stream* stream, uint64_t* id) {
  const pulse_status status =
      input->ids != NULL
          ? pulse_request_submit(engine, input->ids, input->length, sampling, on_token, stream, id)
          : pulse_request_submit_text(engine, input->text, input->length, input->tokenize_flags,
                                      sampling, on_token, stream, id);
  if (status == PULSE_OK) return 1;
  fprintf(stderr, "pulseinfer: cannot submit the prompt (%s): %s\n", pulse_status_string(status),
          pulse_last_error());
  return 0;
}

/* Loads the model, generates, and prints; the prompt's text (if any) is freed by the caller. */
static int generate_with(pulse_model* model, const generate_flags* flags, output_format format,
                         prompt* input) {
  pulse_model_info info;
  info.struct_size = sizeof(info);
  if (pulse_model_info_get(model, &info) != PULSE_OK) {
    fprintf(stderr, "pulseinfer: %s\n", pulse_last_error());
    return kExitFailure;
  }
  if (input->ids == NULL) {
    if (info.tokenizer[0] == '\0') {
      fputs("pulseinfer generate: the model has no tokenizer: pass the prompt with --prompt-ids\n",
            stderr);
      return kExitUsage;
    }
    if (!prepare_text(model, flags, input)) return kExitFailure;
  }
  if (format == kFormatText && info.tokenizer[0] == '\0') format = kFormatIds;

  const char* stop_storage = NULL;
  pulse_sampling_params sampling;
  sampling_flags_apply(&flags->sampling, &stop_storage, &sampling);
  token_stream stream = {format, flags->quiet, input->tokens, 0};
  pulse_engine* engine = create_single_engine(
      model, input->tokens + (size_t)flags->sampling.max_tokens, &flags->offload);
  if (engine == NULL) return kExitFailure;
  uint64_t id = 0;
  const double start = clock_seconds();
  int exit_code = kExitFailure;
  if (submit(engine, input, &sampling, &stream, &id) &&
      run_to_completion(engine, input->tokens, flags->quiet)) {
    exit_code = finish(engine, id, format, flags->quiet, clock_seconds() - start);
    if (!flags->quiet) print_offload_stats(engine);
  }
  pulse_engine_free(engine);
  return exit_code;
}

static int generate(const generate_flags* flags, output_format format, const int32_t* ids,
                    size_t id_count) {
  pulse_model* model = model_flags_load(&flags->model, flags->quiet);
  if (model == NULL) return kExitFailure;
  prompt input = {ids, NULL, id_count, 0, id_count};
  const int exit_code = generate_with(model, flags, format, &input);
  free(input.text);
  pulse_model_free(model);
  return exit_code;
}

int command_generate(int argc, char** argv) {
  generate_flags flags;
  flag_spec specs[kGenerateFlagCount];
  generate_flags_init(&flags, specs);
  switch (parse_flags("pulseinfer generate", argc, argv, 0, specs, kGenerateFlagCount)) {
    case kParsedHelp:
      printf(kGenerateHelp, kDefaultMaxTokens);
      printf(OFFLOAD_FLAGS_HELP, OFFLOAD_FLAGS_HELP_ARGS(flags.offload));
      fputs(kGenerateHelpEnd, stdout);
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
  if ((flags.prompt == NULL) == (flags.prompt_ids == NULL)) {
    fputs("pulseinfer generate: give the prompt with either --prompt or --prompt-ids\n", stderr);
    return kExitUsage;
  }
  if ((flags.chat || flags.system != NULL) && flags.prompt == NULL) {
    fputs("pulseinfer generate: --chat and --system need --prompt TEXT\n", stderr);
    return kExitUsage;
  }
  if (flags.system != NULL && !flags.chat) {
    fputs("pulseinfer generate: --system needs --chat\n", stderr);
    return kExitUsage;
  }
  int32_t* ids = NULL;
  size_t id_count = 0;
  if (flags.prompt_ids != NULL &&
      !parse_token_ids("--prompt-ids", flags.prompt_ids, &ids, &id_count)) {
    return kExitUsage;
  }
  const int exit_code = generate(&flags, format, ids, id_count);
  free(ids);
  return exit_code;
}
