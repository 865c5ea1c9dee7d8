#include "engine_run.h"

#include <stdio.h>
#include <stdlib.h>

pulse_engine* create_single_engine(pulse_model* model, size_t context,
                                   const offload_flags* offload) {
  pulse_model_info info;
  info.struct_size = sizeof(info);
  pulse_engine_params params;
  pulse_engine_params_init(&params, sizeof(params));
  if (offload != NULL && !offload_flags_apply(offload, &params)) return NULL;
  pulse_status status = pulse_model_info_get(model, &info);
  if (status == PULSE_OK) {
    if (context > (size_t)info.context_length) context = (size_t)info.context_length;
    params.max_batch = 1;
    params.max_context = (int32_t)context;
    /* The library rounds each capacity up to whole blocks. */
    const int64_t context_tokens = (int64_t)context;
    if (params.kv_capacity_tokens == 0) params.kv_capacity_tokens = context_tokens;
    /* One request: a host tier of its context and slots of its budget are all it can use. */
    if (params.offload_mode != PULSE_OFFLOAD_OFF && params.offload_host_tokens == 0) {
      params.offload_host_tokens = context_tokens;
    }
    if (params.offload_mode != PULSE_OFFLOAD_OFF && params.offload_slot_tokens == 0) {
      params.offload_slot_tokens = params.offload_budget_tokens < context_tokens
                                       ? params.offload_budget_tokens
                                       : context_tokens;
    }
    pulse_engine* engine = NULL;
    status = pulse_engine_create(model, &params, &engine);
    if (status == PULSE_OK) return engine;
  }
  fprintf(stderr, "pulseinfer: cannot create the engine (%s): %s\n", pulse_status_string(status),
          pulse_last_error());
  return NULL;
}

int run_to_completion(pulse_engine* engine, size_t prompt_tokens, int quiet) {
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

char* copy_request_text(pulse_engine* engine, uint64_t id, size_t* len) {
  if (pulse_request_text(engine, id, NULL, 0, len) != PULSE_BUFFER_TOO_SMALL) return NULL;
  char* text = (char*)malloc(*len + 1);
  if (text != NULL && pulse_request_text(engine, id, text, *len + 1, len) != PULSE_OK) {
    free(text);
    return NULL;
  }
  return text;
}

char* copy_chat_prompt(const pulse_model* model, const pulse_chat_message* messages, size_t count,
                       size_t* len, const char* command) {
  pulse_status status = pulse_chat_apply_template(model, messages, count, 1, NULL, 0, len);
  char* text = NULL;
  if (status == PULSE_BUFFER_TOO_SMALL) {
    text = (char*)malloc(*len + 1);
    if (text == NULL) return NULL;
    status = pulse_chat_apply_template(model, messages, count, 1, text, *len + 1, len);
  }
  if (status == PULSE_OK) return text;
  fprintf(stderr, "%s: cannot apply the chat template (%s): %s\n", command,
          pulse_status_string(status), pulse_last_error());
  free(text);
  return NULL;
}

/* The length of the valid UTF-8 sequence at s (left bytes remain), or 0 when it is none: a lone
 * continuation byte, an overlong form, a surrogate, past U+10FFFF or cut short. */
static size_t utf8_sequence(const unsigned char* s, size_t left) {
  size_t length = 0;
  unsigned min = 0;
  if (s[0] < 0x80) return 1;
  if (s[0] >= 0xC2 && s[0] <= 0xDF) {
    length = 2;
    min = 0x80;
  } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
    length = 3;
    min = 0x800;
  } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
    length = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (left < length) return 0;
  unsigned code = s[0] & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    code = (code << 6) | (s[i] & 0x3F);
  }
  if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

void print_json_string(const char* text, size_t len) {
  const unsigned char* bytes = (const unsigned char*)text;
  putchar('"');
  for (size_t i = 0; i < len;) {
    const unsigned char c = bytes[i];
    const size_t length = utf8_sequence(bytes + i, len - i);
    if (length == 0) {
      /* Text cut inside a character (generation stopped there) or bytes that are no UTF-8: JSON
       * holds Unicode only. */
      fputs("\\ufffd", stdout);
      i += 1;
      continue;
    }
    if (length > 1) {
      fwrite(bytes + i, 1, length, stdout);
      i += length;
      continue;
    }
    switch (c) {
      case '"':
        fputs("\\\"", stdout);
        break;
      case '\\':
        fputs("\\\\", stdout);
        break;
      case '\n':
        fputs("\\n", stdout);
        break;
      case '\r':
        fputs("\\r", stdout);
        break;
      case '\t':
        fputs("\\t", stdout);
        break;
      default:
        if (c < 0x20) {
          printf("\\u%04x", c);
        } else {
          putchar(c);
        }
    }
    i += 1;
  }
  putchar('"');
}
