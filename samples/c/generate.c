/* generate: text in, text (or token ids) out, in plain C99 against the installed pulseinfer.h.
 *
 *   cc generate.c $(pkg-config --cflags --libs pulseinfer) -o generate
 *   ./generate --model MODEL.gguf --prompt "Once upon a time" [--max-tokens 32] [--ids]
 *
 * Greedy decoding of the prompt encoded as plain text; the text streams to stdout as it comes,
 * or with --ids the generated token ids print as one comma-separated line. */
#include <pulseinfer/pulseinfer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct output {
  int ids;
  int printed;
} output;

static int on_token(void* user_data, const pulse_token_event* event) {
  output* out = (output*)user_data;
  if (out->ids) {
    printf("%s%d", out->printed++ == 0 ? "" : ",", (int)event->token);
  } else {
    fwrite(event->text, 1, event->text_len, stdout);
  }
  fflush(stdout);
  return 0;
}

static int usage(void) {
  fputs("usage: generate --model PATH --prompt TEXT [--max-tokens N] [--ids]\n", stderr);
  return 2;
}

int main(int argc, char** argv) {
  const char* model_path = NULL;
  const char* prompt = NULL;
  int max_tokens = 32;
  output out = {0, 0};
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--ids") == 0) {
      out.ids = 1;
    } else if (i + 1 < argc && strcmp(argv[i], "--model") == 0) {
      model_path = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--prompt") == 0) {
      prompt = argv[++i];
    } else if (i + 1 < argc && strcmp(argv[i], "--max-tokens") == 0) {
      max_tokens = atoi(argv[++i]);
    } else {
      return usage();
    }
  }
  if (model_path == NULL || prompt == NULL || max_tokens < 1) return usage();

  pulse_model* model = NULL;
  pulse_engine* engine = NULL;
  pulse_status status = pulse_model_load(model_path, NULL, &model);
  if (status == PULSE_OK) status = pulse_engine_create(model, NULL, &engine);
  pulse_model_free(model); /* the engine holds its own reference */

  pulse_sampling_params sampling;
  if (status == PULSE_OK) status = pulse_sampling_params_init(&sampling, sizeof(sampling));
  if (status == PULSE_OK) {
    sampling.temperature = 0.0f;
    sampling.max_tokens = max_tokens;
    uint64_t id = 0;
    status = pulse_request_submit_text(engine, prompt, strlen(prompt), PULSE_TOKENIZE_DEFAULT,
                                       &sampling, on_token, &out, &id);
  }
  if (status == PULSE_OK) status = pulse_engine_run(engine); /* callbacks run here */
  if (status == PULSE_OK) putchar('\n');
  if (status != PULSE_OK) fprintf(stderr, "generate: %s\n", pulse_last_error());
  pulse_engine_free(engine);
  return status == PULSE_OK ? 0 : 1;
}
