/* pulseinfer chat: an interactive conversation through the model's chat template. Each line read
 * from stdin is a user message; the reply streams to stdout. The history is kept within the
 * context by dropping the oldest turns. Ends at end of input (Ctrl-D). Works with piped stdin. */
#define _POSIX_C_SOURCE 200809L /* getline, isatty */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "engine_run.h"
#include "model_flags.h"
#include "sampling_flags.h"

enum { kDefaultReplyTokens = 256, kDefaultContext = 4096 };

static const char kChatHelp[] =
    "usage: pulseinfer chat --model PATH [options]\n"
    "Chats with the model: each line on stdin is a user message, the reply streams to stdout.\n"
    "The conversation so far is the context; the oldest turns are dropped when it is full.\n"
    "End with Ctrl-D (end of input).\n"
    "\n"
    "options:\n" MODEL_FLAGS_HELP
    "  --system TEXT         the system message\n"
    "  --context N           tokens of conversation kept (default %d, at most the "
    "model's)\n" SAMPLING_FLAGS_HELP
    "  --quiet               no progress on stderr\n"
    "  --help                this message\n";

typedef struct chat_flags {
  model_flags model;
  sampling_flags sampling;
  const char* system;
  int32_t context;
  int quiet;
} chat_flags;

enum { kChatFlagCount = kModelFlagCount + kSamplingFlagCount + 3 };

/* The conversation: messages[0] is the system message when there is one. */
typedef struct history {
  pulse_chat_message* messages;
  char** owned; /* the malloc'ed content of each message (NULL for the system message) */
  size_t count;
  size_t capacity;
  size_t first_turn; /* messages before it are kept when turns are dropped */
} history;

static int history_push(history* h, const char* role, char* content) {
  if (h->count == h->capacity) {
    const size_t capacity = h->capacity == 0 ? 16 : 2 * h->capacity;
    pulse_chat_message* messages = realloc(h->messages, capacity * sizeof(*messages));
    if (messages == NULL) return 0;
    h->messages = messages;
    char** owned = realloc(h->owned, capacity * sizeof(*owned));
    if (owned == NULL) return 0;
    h->owned = owned;
    h->capacity = capacity;
  }
  h->messages[h->count] = (pulse_chat_message){role, content};
  h->owned[h->count] = content;
  h->count += 1;
  return 1;
}

/* Drops `n` messages from index `at`. */
static void history_erase(history* h, size_t at, size_t n) {
  for (size_t i = at; i < at + n; ++i) free(h->owned[i]);
  memmove(h->messages + at, h->messages + at + n, (h->count - at - n) * sizeof(*h->messages));
  memmove(h->owned + at, h->owned + at + n, (h->count - at - n) * sizeof(*h->owned));
  h->count -= n;
}

/* Drops the oldest turn after the kept system message: a user message and its reply, so that
 * the roles still alternate as templates such as Mistral's require. */
static void history_drop_oldest_turn(history* h) {
  const size_t at = h->first_turn;
  const int with_reply = at + 1 < h->count && strcmp(h->messages[at + 1].role, "assistant") == 0;
  history_erase(h, at, with_reply ? 2 : 1);
}

/* Drops the newest message (the user message that could not be answered). */
static void history_drop_newest(history* h) { history_erase(h, h->count - 1, 1); }

static void history_free(history* h) {
  for (size_t i = 0; i < h->count; ++i) free(h->owned[i]);
  free(h->messages);
  free(h->owned);
}

/* Renders the conversation, dropping the oldest turns until it and a reply of `reply_tokens`
 * fit `context`. NULL (after printing why) when even the newest message alone does not fit. */
static char* render_within(const pulse_model* model, history* h, size_t context,
                           size_t reply_tokens, size_t* len, size_t* tokens) {
  for (;;) {
    char* text = copy_chat_prompt(model, h->messages, h->count, len, "pulseinfer chat");
    if (text == NULL) return NULL;
    const pulse_status status =
        pulse_tokenize(model, text, *len, PULSE_TOKENIZE_PARSE_SPECIAL, NULL, 0, tokens);
    if (status != PULSE_OK && status != PULSE_BUFFER_TOO_SMALL) {
      fprintf(stderr, "pulseinfer chat: cannot tokenize (%s): %s\n", pulse_status_string(status),
              pulse_last_error());
      free(text);
      return NULL;
    }
    if (*tokens + reply_tokens <= context) return text;
    free(text);
    if (h->count - h->first_turn <= 1) {
      fprintf(stderr,
              "pulseinfer chat: this message (%zu tokens with the template) and a reply of %zu "
              "tokens do not fit the context of %zu tokens\n",
              *tokens, reply_tokens, context);
      return NULL;
    }
    history_drop_oldest_turn(h);
  }
}

static int on_text(void* user_data, const pulse_token_event* event) {
  (void)user_data;
  fwrite(event->text, 1, event->text_len, stdout);
  fflush(stdout);
  return 0;
}

/* One turn: the user's line in, the reply streamed out and kept. Returns 0 when the chat must
 * end (an engine failure); a message that cannot be answered is reported and dropped. */
static int chat_turn(pulse_model* model, pulse_engine* engine, history* h,
                     const pulse_sampling_params* sampling, size_t context, int quiet) {
  size_t len = 0;
  size_t tokens = 0;
  char* text = render_within(model, h, context, (size_t)sampling->max_tokens, &len, &tokens);
  if (text == NULL) {
    history_drop_newest(h);
    return 1;
  }
  uint64_t id = 0;
  const pulse_status status = pulse_request_submit_text(
      engine, text, len, PULSE_TOKENIZE_PARSE_SPECIAL, sampling, on_text, NULL, &id);
  free(text);
  if (status != PULSE_OK) {
    fprintf(stderr, "pulseinfer chat: cannot submit (%s): %s\n", pulse_status_string(status),
            pulse_last_error());
    history_drop_newest(h);
    return 1;
  }
  const int ran = run_to_completion(engine, tokens, quiet);
  putchar('\n');
  fflush(stdout);
  size_t reply_len = 0;
  char* reply = ran ? copy_request_text(engine, id, &reply_len) : NULL;
  pulse_request_release(engine, id);
  if (reply == NULL || !history_push(h, "assistant", reply)) {
    free(reply);
    return 0;
  }
  return 1;
}

static int chat_loop(pulse_model* model, pulse_engine* engine, const chat_flags* flags,
                     size_t context) {
  const char* stop_storage = NULL;
  pulse_sampling_params sampling;
  sampling_flags_apply(&flags->sampling, &stop_storage, &sampling);
  history h = {NULL, NULL, 0, 0, 0};
  if (flags->system != NULL) {
    if (!history_push(&h, "system", NULL)) return kExitFailure;
    h.messages[0].content = flags->system;
    h.first_turn = 1;
  }
  const int interactive = isatty(STDIN_FILENO);
  char* line = NULL;
  size_t line_capacity = 0;
  int exit_code = kExitOk;
  for (;;) {
    if (interactive) {
      fputs("> ", stdout);
      fflush(stdout);
    }
    const ssize_t read = getline(&line, &line_capacity, stdin);
    if (read < 0) break;
    size_t length = (size_t)read;
    while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r')) --length;
    if (length == 0) continue;
    char* content = malloc(length + 1);
    if (content == NULL) {
      exit_code = kExitFailure;
      break;
    }
    memcpy(content, line, length);
    content[length] = '\0';
    if (!history_push(&h, "user", content)) {
      free(content);
      exit_code = kExitFailure;
      break;
    }
    if (!chat_turn(model, engine, &h, &sampling, context, flags->quiet)) {
      exit_code = kExitFailure;
      break;
    }
  }
  if (interactive) putchar('\n');
  free(line);
  history_free(&h);
  return exit_code;
}

int command_chat(int argc, char** argv) {
  chat_flags flags;
  flag_spec specs[kChatFlagCount];
  model_flags_init(&flags.model, specs);
  sampling_flags_init(&flags.sampling, kDefaultReplyTokens, specs + kModelFlagCount);
  flags.system = NULL;
  flags.context = kDefaultContext;
  flags.quiet = 0;
  flag_spec* own = specs + kModelFlagCount + kSamplingFlagCount;
  own[0] = (flag_spec){"--system", kFlagString, &flags.system, 0, 0};
  own[1] = (flag_spec){"--context", kFlagInt32, &flags.context, 2, 1 << 24};
  own[2] = (flag_spec){"--quiet", kFlagSwitch, &flags.quiet, 0, 0};
  switch (parse_flags("pulseinfer chat", argc, argv, 0, specs, kChatFlagCount)) {
    case kParsedHelp:
      printf(kChatHelp, kDefaultContext, kDefaultReplyTokens);
      return kExitOk;
    case kParsedBadUsage:
      return kExitUsage;
    case kParsedFlags:
      break;
  }
  if (flags.model.path == NULL) {
    fputs("pulseinfer chat: --model is required (see pulseinfer chat --help)\n", stderr);
    return kExitUsage;
  }
  pulse_model* model = model_flags_load(&flags.model, flags.quiet);
  if (model == NULL) return kExitFailure;
  pulse_model_info info;
  info.struct_size = sizeof(info);
  int exit_code = kExitFailure;
  if (pulse_model_info_get(model, &info) != PULSE_OK || info.chat_template[0] == '\0') {
    /* The template's own error says why (none, or not one the library renders). */
    size_t len = 0;
    const pulse_status status = pulse_chat_apply_template(model, NULL, 0, 1, NULL, 0, &len);
    fprintf(stderr, "pulseinfer chat: the model has no usable chat template (%s): %s\n",
            pulse_status_string(status), pulse_last_error());
  } else {
    size_t context = (size_t)flags.context;
    if (context > (size_t)info.context_length) context = (size_t)info.context_length;
    pulse_engine* engine = create_single_engine(model, context, NULL);
    if (engine != NULL) exit_code = chat_loop(model, engine, &flags, context);
    pulse_engine_free(engine);
  }
  pulse_model_free(model);
  return exit_code;
}
