// The library-wide entry points: versions, features, status and reason names, last error.
#include "capi/src/status_map.h"
#include "core/backend/cuda/cuda_backend.h"
#include "pulseinfer/pulseinfer.h"

#ifndef PULSEINFER_VERSION
#error "the build defines PULSEINFER_VERSION (the project version)"
#endif

extern "C" {

const char* pulse_version(void) { return PULSEINFER_VERSION; }

int32_t pulse_abi_version(void) { return PULSE_ABI_VERSION; }

uint64_t pulse_features(void) {
  uint64_t features = PULSE_FEATURE_CPU;
  if (pulse::CudaBackendCompiled()) features |= PULSE_FEATURE_CUDA_COMPILED;
  if (pulse::CudaDeviceCount() > 0) features |= PULSE_FEATURE_CUDA_DEVICE;
  return features;
}

const char* pulse_last_error(void) { return pulse::capi::LastError(); }

const char* pulse_status_string(pulse_status status) {
  switch (status) {
    case PULSE_OK:
      return "ok";
    case PULSE_NO_CAPACITY:
      return "no capacity";
    case PULSE_CANCELLED:
      return "cancelled";
    case PULSE_AGAIN:
      return "not finished yet";
    case PULSE_BUFFER_TOO_SMALL:
      return "buffer too small";
    case PULSE_INVALID_ARGUMENT:
      return "invalid argument";
    case PULSE_NOT_FOUND:
      return "not found";
    case PULSE_IO:
      return "i/o error";
    case PULSE_INVALID_MODEL:
      return "invalid model";
    case PULSE_UNSUPPORTED:
      return "unsupported";
    case PULSE_OUT_OF_MEMORY:
      return "out of memory";
    case PULSE_FAILED_PRECONDITION:
      return "failed precondition";
    case PULSE_INTERNAL:
      return "internal error";
    default:
      return "unknown status";
  }
}

const char* pulse_finish_reason_string(pulse_finish_reason reason) {
  switch (reason) {
    case PULSE_FINISH_NONE:
      return "none";
    case PULSE_FINISH_MAX_TOKENS:
      return "max_tokens";
    case PULSE_FINISH_STOP_TOKEN:
      return "stop_token";
    case PULSE_FINISH_CONTEXT:
      return "context";
    case PULSE_FINISH_CANCELLED:
      return "cancelled";
    case PULSE_FINISH_CAPACITY:
      return "capacity";
    case PULSE_FINISH_ERROR:
      return "error";
    case PULSE_FINISH_STOP_STRING:
      return "stop_string";
    default:
      return "unknown";
  }
}

}  // extern "C"
