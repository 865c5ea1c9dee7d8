#include "capi/src/status_map.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pulse::capi {
namespace {

thread_local std::string tls_message;
// Set instead of tls_message when storing a message failed (out of memory).
thread_local const char* tls_fixed_message = nullptr;

}  // namespace

pulse_status ToPulseStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return PULSE_OK;
    case absl::StatusCode::kUnavailable:
      return PULSE_NO_CAPACITY;
    case absl::StatusCode::kCancelled:
      return PULSE_CANCELLED;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return PULSE_INVALID_ARGUMENT;
    case absl::StatusCode::kNotFound:
      return PULSE_NOT_FOUND;
    case absl::StatusCode::kPermissionDenied:
      return PULSE_IO;
    case absl::StatusCode::kDataLoss:
      return PULSE_INVALID_MODEL;
    case absl::StatusCode::kUnimplemented:
      return PULSE_UNSUPPORTED;
    case absl::StatusCode::kResourceExhausted:
      return PULSE_OUT_OF_MEMORY;
    case absl::StatusCode::kFailedPrecondition:
      return PULSE_FAILED_PRECONDITION;
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnauthenticated:
    default:
      return PULSE_INTERNAL;
  }
}

pulse_status Fail(pulse_status code, absl::string_view function, absl::string_view message) {
  try {
    tls_message = absl::StrCat(function, ": ", message);
    tls_fixed_message = nullptr;
  } catch (...) {
    tls_fixed_message = "out of memory while recording an error message";
  }
  return code;
}

pulse_status Fail(const absl::Status& status, absl::string_view function, ErrorSubject subject) {
  pulse_status code = ToPulseStatus(status.code());
  if (subject == ErrorSubject::kModelFile && code == PULSE_INVALID_ARGUMENT) {
    code = PULSE_INVALID_MODEL;
  }
  if (code == PULSE_OK) {
    return Fail(PULSE_INTERNAL, function, "an OK status was reported as a failure");
  }
  return Fail(code, function, status.message());
}

const char* LastError() {
  return tls_fixed_message != nullptr ? tls_fixed_message : tls_message.c_str();
}

}  // namespace pulse::capi
