// Status helpers for the core. The core reports every failure as absl::Status; only capi/
// turns a Status into a pulse_status code and a thread-local message.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PULSE_STATUS_CONCAT_INNER_(a, b) a##b
#define PULSE_STATUS_CONCAT_(a, b) PULSE_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define PULSE_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status pulse_status_ = (expr);         \
    if (!pulse_status_.ok()) return pulse_status_; \
  } while (false)

// `lhs = value of expr` for an absl::StatusOr<T> expression, or returns its error.
#define PULSE_ASSIGN_OR_RETURN(lhs, expr) \
  PULSE_ASSIGN_OR_RETURN_IMPL_(PULSE_STATUS_CONCAT_(pulse_statusor_, __LINE__), lhs, expr)
#define PULSE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
