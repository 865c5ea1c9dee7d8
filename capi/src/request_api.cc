// The pulse_request_* entry points and pulse_sampling_params_init.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capi/src/guard.h"
#include "capi/src/handles.h"
#include "capi/src/output_buffer.h"
#include "capi/src/params.h"
#include "capi/src/text_codec.h"
#include "capi/src/versioned_struct.h"

using pulse::capi::Guard;

namespace {

absl::Status CheckEngine(const pulse_engine* engine) {
  return engine == nullptr ? absl::InvalidArgumentError("engine is NULL") : absl::OkStatus();
}

absl::Status CheckTokenBuffer(const int32_t* tokens, size_t capacity) {
  if (tokens == nullptr && capacity > 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokens is NULL but capacity is ", capacity));
  }
  return absl::OkStatus();
}

// The engine's sink for a C callback: a nonzero return, or an exception thrown against the
// header's rules, cancels the request.
pulse::TokenSink MakeSink(pulse_token_callback callback, void* user_data) {
  if (callback == nullptr) return {};
  return [callback, user_data](const pulse::TokenEvent& event) -> bool {
    pulse_token_event c_event{};
    c_event.struct_size = sizeof(c_event);
    c_event.token = event.token;
    c_event.request_id = event.id;
    c_event.index = event.index;
    c_event.finished = event.finished ? 1 : 0;
    c_event.finish_reason = pulse::capi::ToPulseFinishReason(event.reason);
    // The engine's text lives in a std::string for the call, so it is NUL-terminated.
    c_event.text = event.text.data();
    c_event.text_len = event.text.size();
    try {
      return callback(user_data, &c_event) == 0;
    } catch (...) {
      return false;
    }
  };
}

// The status of a finished request's failure: PULSE_OK unless it failed.
pulse_status FailureCode(const pulse::RequestSnapshot& snapshot) {
  switch (snapshot.reason) {
    case pulse::FinishReason::kCapacity:
      return PULSE_OUT_OF_MEMORY;
    case pulse::FinishReason::kError:
      return snapshot.error.ok() ? PULSE_INTERNAL
                                 : pulse::capi::ToPulseStatus(snapshot.error.code());
    default:
      return PULSE_OK;
  }
}

// What pulse_request_result returns for a request in this state, recording its message.
pulse_status ResultCode(uint64_t id, const pulse::RequestSnapshot& snapshot) {
  constexpr absl::string_view kFunction = "pulse_request_result";
  if (snapshot.state != pulse::RequestState::kFinished) {
    return pulse::capi::Fail(PULSE_AGAIN, kFunction,
                             absl::StrCat("request ", id, " is not finished"));
  }
  if (snapshot.reason == pulse::FinishReason::kCancelled) {
    return pulse::capi::Fail(PULSE_CANCELLED, kFunction,
                             absl::StrCat("request ", id, " was cancelled"));
  }
  const pulse_status failure = FailureCode(snapshot);
  if (failure == PULSE_OK) return PULSE_OK;
  return pulse::capi::Fail(
      failure, kFunction,
      snapshot.reason == pulse::FinishReason::kCapacity
          ? absl::StrCat("request ", id, " can never fit the KV cache")
          : absl::StrCat("request ", id, " failed: ", snapshot.error.message()));
}

absl::Status Submit(pulse_engine& engine, std::vector<int32_t> prompt,
                    const pulse_sampling_params* sampling, pulse_token_callback callback,
                    void* user_data, uint64_t& out_id) {
  PULSE_ASSIGN_OR_RETURN(
      const pulse_sampling_params complete,
      pulse::capi::ReadVersioned(sampling, pulse::capi::DefaultSamplingParams()));
  PULSE_ASSIGN_OR_RETURN(const pulse::SamplingParams params,
                         pulse::capi::ToSamplingParams(complete));
  PULSE_ASSIGN_OR_RETURN(const pulse::RequestOffload offload,
                         pulse::capi::ToRequestOffload(complete));
  PULSE_ASSIGN_OR_RETURN(out_id, engine.engine->Submit(std::move(prompt), params,
                                                       MakeSink(callback, user_data), offload));
  return absl::OkStatus();
}

}  // namespace

extern "C" {

pulse_status pulse_sampling_params_init(pulse_sampling_params* params, size_t struct_size) {
  return Guard("pulse_sampling_params_init", [&] {
    return pulse::capi::InitVersioned(params, struct_size, pulse::capi::DefaultSamplingParams());
  });
}

pulse_status pulse_request_submit(pulse_engine* engine, const int32_t* tokens, size_t count,
                                  const pulse_sampling_params* sampling,
                                  pulse_token_callback callback, void* user_data,
                                  uint64_t* out_id) {
  return Guard("pulse_request_submit", [&]() -> absl::Status {
    if (out_id == nullptr) return absl::InvalidArgumentError("out_id is NULL");
    *out_id = 0;
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    if (tokens == nullptr && count > 0) {
      return absl::InvalidArgumentError(absl::StrCat("tokens is NULL but count is ", count));
    }
    if (count > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("a prompt of ", count, " tokens is longer than any context"));
    }
    return Submit(*engine, std::vector<int32_t>(tokens, tokens + count), sampling, callback,
                  user_data, *out_id);
  });
}

pulse_status pulse_request_submit_text(pulse_engine* engine, const char* text, size_t text_len,
                                       uint32_t tokenize_flags,
                                       const pulse_sampling_params* sampling,
                                       pulse_token_callback callback, void* user_data,
                                       uint64_t* out_id) {
  return Guard("pulse_request_submit_text", [&]() -> absl::Status {
    if (out_id == nullptr) return absl::InvalidArgumentError("out_id is NULL");
    *out_id = 0;
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    PULSE_ASSIGN_OR_RETURN(
        std::vector<int32_t> prompt,
        pulse::capi::EncodeText(engine->engine->tokenizer(), text, text_len, tokenize_flags));
    return Submit(*engine, std::move(prompt), sampling, callback, user_data, *out_id);
  });
}

pulse_status pulse_request_submit_chat(pulse_engine* engine, const pulse_chat_message* messages,
                                       size_t count, const pulse_sampling_params* sampling,
                                       pulse_token_callback callback, void* user_data,
                                       uint64_t* out_id) {
  return Guard("pulse_request_submit_chat", [&]() -> absl::Status {
    if (out_id == nullptr) return absl::InvalidArgumentError("out_id is NULL");
    *out_id = 0;
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    PULSE_ASSIGN_OR_RETURN(const std::string rendered,
                           pulse::capi::RenderChat(engine->chat_template, messages, count, true));
    PULSE_ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                           pulse::capi::EncodeText(engine->engine->tokenizer(), rendered.data(),
                                                   rendered.size(), PULSE_TOKENIZE_PARSE_SPECIAL));
    return Submit(*engine, std::move(prompt), sampling, callback, user_data, *out_id);
  });
}

pulse_status pulse_request_cancel(pulse_engine* engine, uint64_t id) {
  return Guard("pulse_request_cancel", [&]() -> absl::Status {
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    return engine->engine->Cancel(id);
  });
}

pulse_status pulse_request_poll(pulse_engine* engine, uint64_t id, int32_t* tokens, size_t capacity,
                                size_t* out_count, pulse_request_state* out_state) {
  return Guard("pulse_request_poll", [&]() -> absl::Status {
    if (out_count == nullptr) return absl::InvalidArgumentError("out_count is NULL");
    *out_count = 0;
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    PULSE_RETURN_IF_ERROR(CheckTokenBuffer(tokens, capacity));
    absl::MutexLock lock(&engine->poll_mutex);
    PULSE_ASSIGN_OR_RETURN(const pulse::RequestSnapshot snapshot, engine->engine->Snapshot(id));
    size_t& polled = engine->polled[id];
    const size_t unread = snapshot.tokens.size() - polled;
    if (tokens == nullptr) {
      *out_count = unread;
    } else {
      const size_t count = std::min(capacity, unread);
      std::copy_n(snapshot.tokens.begin() + static_cast<ptrdiff_t>(polled), count, tokens);
      polled += count;
      *out_count = count;
    }
    if (out_state != nullptr) {
      const bool all_read = polled == snapshot.tokens.size();
      *out_state = snapshot.state == pulse::RequestState::kFinished && !all_read
                       ? PULSE_REQUEST_RUNNING
                       : pulse::capi::ToPulseState(snapshot.state);
    }
    return absl::OkStatus();
  });
}

pulse_status pulse_request_result(pulse_engine* engine, uint64_t id, int32_t* tokens,
                                  size_t capacity, size_t* out_count) {
  return Guard("pulse_request_result", [&]() -> absl::StatusOr<pulse_status> {
    if (out_count == nullptr) return absl::InvalidArgumentError("out_count is NULL");
    *out_count = 0;
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    PULSE_RETURN_IF_ERROR(CheckTokenBuffer(tokens, capacity));
    PULSE_ASSIGN_OR_RETURN(const pulse::RequestSnapshot snapshot, engine->engine->Snapshot(id));
    if (tokens != nullptr) {
      std::copy_n(snapshot.tokens.begin(), std::min(capacity, snapshot.tokens.size()), tokens);
    }
    *out_count = snapshot.tokens.size();
    return ResultCode(id, snapshot);
  });
}

pulse_status pulse_request_text(pulse_engine* engine, uint64_t id, char* text, size_t capacity,
                                size_t* out_len) {
  constexpr absl::string_view kFunction = "pulse_request_text";
  return Guard(kFunction, [&]() -> absl::StatusOr<pulse_status> {
    if (out_len == nullptr) return absl::InvalidArgumentError("out_len is NULL");
    *out_len = 0;
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckBuffer(text, capacity, "text"));
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckTokenizer(engine->engine->tokenizer()));
    PULSE_ASSIGN_OR_RETURN(const pulse::RequestSnapshot snapshot, engine->engine->Snapshot(id));
    return pulse::capi::WriteText(snapshot.text, text, capacity, out_len, kFunction);
  });
}

pulse_status pulse_request_stats_get(pulse_engine* engine, uint64_t id,
                                     pulse_request_stats* stats) {
  return Guard("pulse_request_stats_get", [&]() -> absl::Status {
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckOutput(stats));
    PULSE_ASSIGN_OR_RETURN(const pulse::RequestSnapshot snapshot, engine->engine->Snapshot(id));
    pulse_request_stats value{};
    value.struct_size = sizeof(value);
    value.state = pulse::capi::ToPulseState(snapshot.state);
    value.finish_reason = pulse::capi::ToPulseFinishReason(snapshot.reason);
    value.prompt_tokens = snapshot.stats.prompt_tokens;
    value.generated_tokens = snapshot.stats.generated_tokens;
    value.error = FailureCode(snapshot);
    value.queue_ms = snapshot.stats.queue_ms;
    value.ttft_ms = snapshot.stats.ttft_ms;
    value.tpot_ms = snapshot.stats.tpot_ms;
    value.total_ms = snapshot.stats.total_ms;
    pulse::capi::WriteVersioned(value, stats);
    return absl::OkStatus();
  });
}

pulse_status pulse_request_release(pulse_engine* engine, uint64_t id) {
  return Guard("pulse_request_release", [&]() -> absl::Status {
    PULSE_RETURN_IF_ERROR(CheckEngine(engine));
    PULSE_RETURN_IF_ERROR(engine->engine->Release(id));
    absl::MutexLock lock(&engine->poll_mutex);
    engine->polled.erase(id);
    return absl::OkStatus();
  });
}

}  // extern "C"
