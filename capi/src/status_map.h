// The one place where core absl::Status values become pulse_status codes, and the thread-local
// message behind pulse_last_error().
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pulseinfer/pulseinfer.h"

namespace pulse::capi {

pulse_status ToPulseStatus(absl::StatusCode code);

// Which code a core error gets also depends on what the call was reading: while a model file
// is opened or loaded, InvalidArgument and OutOfRange describe the file, not the caller's
// arguments (those were checked before), so they become PULSE_INVALID_MODEL.
enum class ErrorSubject { kArguments, kModelFile };

// Records "<function>: <message>" as the calling thread's last error and returns `code`.
// Never throws (a message that cannot be stored becomes a fixed one).
pulse_status Fail(pulse_status code, absl::string_view function, absl::string_view message);
// The same for a core status (not OK).
pulse_status Fail(const absl::Status& status, absl::string_view function,
                  ErrorSubject subject = ErrorSubject::kArguments);

const char* LastError();

}  // namespace pulse::capi
