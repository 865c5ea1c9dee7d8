/* Running one request at a time through an engine, as generate and chat do. */
#ifndef PULSEINFER_CLI_ENGINE_RUN_H_
#define PULSEINFER_CLI_ENGINE_RUN_H_

#include <stddef.h>
#include <stdint.h>

#include "pulseinfer/pulseinfer.h"

/* An engine for one sequence whose KV cache holds exactly `context` tokens (capped at the
 * model's context). Prints the library's error and returns NULL on failure. */
pulse_engine* create_single_engine(pulse_model* model, size_t context);

/* Steps until nothing is pending, reporting prefill chunks before the last on stderr unless
 * `quiet`. Returns 1, or 0 after printing why a step failed. */
int run_to_completion(pulse_engine* engine, size_t prompt_tokens, int quiet);

/* Writes text[len] to stdout as a JSON string literal. */
void print_json_string(const char* text, size_t len);

#endif /* PULSEINFER_CLI_ENGINE_RUN_H_ */
