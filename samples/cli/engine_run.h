/* Running one request at a time through an engine, as generate and chat do. */
#ifndef PULSEINFER_CLI_ENGINE_RUN_H_
#define PULSEINFER_CLI_ENGINE_RUN_H_

#include <stddef.h>
#include <stdint.h>

#include "offload_flags.h"
#include "pulseinfer/pulseinfer.h"

/* An engine for one sequence whose KV cache holds exactly `context` tokens (capped at the
 * model's context), with the sparse attention of `offload` (NULL: dense). Prints the library's
 * error and returns NULL on failure. */
pulse_engine* create_single_engine(pulse_model* model, size_t context,
                                   const offload_flags* offload);

/* Steps until nothing is pending, reporting prefill chunks before the last on stderr unless
 * `quiet`. Returns 1, or 0 after printing why a step failed. */
int run_to_completion(pulse_engine* engine, size_t prompt_tokens, int quiet);

/* The request's text so far (pulse_request_text), malloc'ed with a NUL (free it), its length in
 * *len; NULL when it cannot be read. */
char* copy_request_text(pulse_engine* engine, uint64_t id, size_t* len);

/* messages[count] through the model's chat template with the generation prompt, malloc'ed with a
 * NUL (free it), its length in *len; NULL after printing why, prefixed by `command`. */
char* copy_chat_prompt(const pulse_model* model, const pulse_chat_message* messages, size_t count,
                       size_t* len, const char* command);

/* Writes text[len] to stdout as a JSON string literal; a byte that begins no valid UTF-8 sequence
 * (text cut inside a character) is written as U+FFFD. */
void print_json_string(const char* text, size_t len);

#endif /* PULSEINFER_CLI_ENGINE_RUN_H_ */
