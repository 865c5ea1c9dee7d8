// pulse_tokenize, pulse_detokenize and pulse_chat_apply_template.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capi/src/guard.h"
#include "capi/src/handles.h"
#include "capi/src/output_buffer.h"
#include "capi/src/text_codec.h"

using pulse::capi::Guard;

namespace {

absl::Status CheckModel(const pulse_model* model) {
  return model == nullptr ? absl::InvalidArgumentError("model is NULL") : absl::OkStatus();
}

absl::StatusOr<std::string> Decode(const pulse::Tokenizer& tokenizer, const int32_t* tokens,
                                   size_t count, uint32_t flags) {
  if (tokens == nullptr && count > 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokens is NULL but count is ", count));
  }
  if ((flags & ~PULSE_DETOKENIZE_RENDER_SPECIAL) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown detokenize flags 0x", absl::Hex(flags & ~PULSE_DETOKENIZE_RENDER_SPECIAL)));
  }
  const std::span<const int32_t> ids(tokens, count);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tokenizer.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token ", ids[i], " at position ", i,
                                                     " is outside the tokenizer's vocabulary [0, ",
                                                     tokenizer.vocab_size(), ")"));
    }
  }
  return tokenizer.Decode(ids, {.render_special = (flags & PULSE_DETOKENIZE_RENDER_SPECIAL) != 0});
}

}  // namespace

extern "C" {

pulse_status pulse_tokenize(const pulse_model* model, const char* text, size_t text_len,
                            uint32_t flags, int32_t* tokens, size_t capacity, size_t* out_count) {
  constexpr absl::string_view kFunction = "pulse_tokenize";
  return Guard(kFunction, [&]() -> absl::StatusOr<pulse_status> {
    if (out_count == nullptr) return absl::InvalidArgumentError("out_count is NULL");
    *out_count = 0;
    PULSE_RETURN_IF_ERROR(CheckModel(model));
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckBuffer(tokens, capacity, "tokens"));
    PULSE_ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                           pulse::capi::EncodeText(model->tokenizer.get(), text, text_len, flags));
    return pulse::capi::WriteTokens(ids, tokens, capacity, out_count, kFunction);
  });
}

pulse_status pulse_detokenize(const pulse_model* model, const int32_t* tokens, size_t count,
                              uint32_t flags, char* text, size_t capacity, size_t* out_len) {
  constexpr absl::string_view kFunction = "pulse_detokenize";
  return Guard(kFunction, [&]() -> absl::StatusOr<pulse_status> {
    if (out_len == nullptr) return absl::InvalidArgumentError("out_len is NULL");
    *out_len = 0;
    PULSE_RETURN_IF_ERROR(CheckModel(model));
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckBuffer(text, capacity, "text"));
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckTokenizer(model->tokenizer.get()));
    PULSE_ASSIGN_OR_RETURN(const std::string decoded,
                           Decode(*model->tokenizer, tokens, count, flags));
    return pulse::capi::WriteText(decoded, text, capacity, out_len, kFunction);
  });
}

pulse_status pulse_chat_apply_template(const pulse_model* model, const pulse_chat_message* messages,
                                       size_t count, int32_t add_generation_prompt, char* text,
                                       size_t capacity, size_t* out_len) {
  constexpr absl::string_view kFunction = "pulse_chat_apply_template";
  return Guard(kFunction, [&]() -> absl::StatusOr<pulse_status> {
    if (out_len == nullptr) return absl::InvalidArgumentError("out_len is NULL");
    *out_len = 0;
    PULSE_RETURN_IF_ERROR(CheckModel(model));
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckBuffer(text, capacity, "text"));
    PULSE_ASSIGN_OR_RETURN(
        const std::string rendered,
        pulse::capi::RenderChat(model->chat_template, messages, count, add_generation_prompt != 0));
    return pulse::capi::WriteText(rendered, text, capacity, out_len, kFunction);
  });
}

}  // extern "C"
