/* Submitting a request whose token events go to Go: the callback's user_data is the request's
 * runtime/cgo.Handle. */
#ifndef PULSEINFER_GO_TOKEN_CALLBACK_H_
#define PULSEINFER_GO_TOKEN_CALLBACK_H_

#include <pulseinfer/pulseinfer.h>
#include <stdint.h>

pulse_status submit_streamed(pulse_engine* engine, const int32_t* tokens, size_t count,
                             const pulse_sampling_params* sampling, uintptr_t handle,
                             uint64_t* out_id);

pulse_status submit_streamed_text(pulse_engine* engine, const char* text, size_t text_len,
                                  uint32_t tokenize_flags, const pulse_sampling_params* sampling,
                                  uintptr_t handle, uint64_t* out_id);

pulse_status submit_streamed_chat(pulse_engine* engine, const pulse_chat_message* messages,
                                  size_t count, const pulse_sampling_params* sampling,
                                  uintptr_t handle, uint64_t* out_id);

#endif /* PULSEINFER_GO_TOKEN_CALLBACK_H_ */
