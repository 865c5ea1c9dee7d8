#include "token_callback.h"

#include "_cgo_export.h"

/* The handle travels as the pointer-sized user_data; only C converts between the two. */
static int forward_token_event(void* user_data, const pulse_token_event* event) {
  return goTokenEvent((uintptr_t)user_data, (pulse_token_event*)event);
}

pulse_status submit_streamed(pulse_engine* engine, const int32_t* tokens, size_t count,
                             const pulse_sampling_params* sampling, uintptr_t handle,
                             uint64_t* out_id) {
  return pulse_request_submit(engine, tokens, count, sampling, forward_token_event, (void*)handle,
                              out_id);
}

pulse_status submit_streamed_text(pulse_engine* engine, const char* text, size_t text_len,
                                  uint32_t tokenize_flags, const pulse_sampling_params* sampling,
                                  uintptr_t handle, uint64_t* out_id) {
  return pulse_request_submit_text(engine, text, text_len, tokenize_flags, sampling,
                                   forward_token_event, (void*)handle, out_id);
}

pulse_status submit_streamed_chat(pulse_engine* engine, const pulse_chat_message* messages,
                                  size_t count, const pulse_sampling_params* sampling,
                                  uintptr_t handle, uint64_t* out_id) {
  return pulse_request_submit_chat(engine, messages, count, sampling, forward_token_event,
                                   (void*)handle, out_id);
}
