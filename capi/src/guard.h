// The frame of every status-returning entry point: runs the body, turns a failed absl::Status
// into a pulse_status with the thread's last error set, and catches every exception so that
// none crosses the ABI.
#pragma once

#include <exception>
#include <new>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capi/src/status_map.h"

namespace pulse::capi {

inline pulse_status Finish(const absl::Status& status, absl::string_view function,
                           ErrorSubject subject) {
  return status.ok() ? PULSE_OK : Fail(status, function, subject);
}

// For calls whose success has several codes (PULSE_OK, PULSE_AGAIN, PULSE_CANCELLED): the body
// returns the code, having recorded a message with Fail() when it is not PULSE_OK.
inline pulse_status Finish(const absl::StatusOr<pulse_status>& code, absl::string_view function,
                           ErrorSubject subject) {
  return code.ok() ? *code : Fail(code.status(), function, subject);
}

// `body` returns absl::Status or absl::StatusOr<pulse_status>.
template <typename Body>
pulse_status Guard(absl::string_view function, Body&& body,
                   ErrorSubject subject = ErrorSubject::kArguments) {
  try {
    return Finish(body(), function, subject);
  } catch (const std::bad_alloc&) {
    return Fail(PULSE_OUT_OF_MEMORY, function, "out of memory");
  } catch (const std::exception& e) {
    return Fail(PULSE_INTERNAL, function, e.what());
  } catch (...) {
    return Fail(PULSE_INTERNAL, function, "unknown exception");
  }
}

}  // namespace pulse::capi
