// Reading and writing the ABI's versioned structs: each starts with uint32_t struct_size, the
// library touches at most struct_size bytes of the caller's struct, and fields past what the
// caller knows take their defaults. kV0Size is each struct's version-0 layout (through its
// last field): frozen, since callers built against version 0 pass exactly that much.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "pulseinfer/pulseinfer.h"

namespace pulse::capi {

template <typename T>
inline constexpr size_t kV0Size = 0;
template <typename T>
inline constexpr absl::string_view kStructName = "";

#define PULSE_CAPI_V0_STRUCT(type, last_field)                                                   \
  template <>                                                                                    \
  inline constexpr size_t kV0Size<type> = offsetof(type, last_field) + sizeof(type::last_field); \
  template <>                                                                                    \
  inline constexpr absl::string_view kStructName<type> = #type

PULSE_CAPI_V0_STRUCT(pulse_model_params, random_weights);
PULSE_CAPI_V0_STRUCT(pulse_model_info, backend);
PULSE_CAPI_V0_STRUCT(pulse_engine_params, kv_capacity_tokens);
PULSE_CAPI_V0_STRUCT(pulse_step_report, pending);
PULSE_CAPI_V0_STRUCT(pulse_sampling_params, stop_token_count);
PULSE_CAPI_V0_STRUCT(pulse_request_stats, total_ms);
PULSE_CAPI_V0_STRUCT(pulse_engine_stats, kv_blocks_in_use);

#undef PULSE_CAPI_V0_STRUCT

template <typename T>
absl::Status CheckStructSize(size_t struct_size) {
  static_assert(std::is_trivially_copyable_v<T> && kV0Size<T> > 0);
  if (struct_size < kV0Size<T>) {
    return absl::InvalidArgumentError(absl::StrCat(kStructName<T>, ".struct_size is ", struct_size,
                                                   ", smaller than its version-0 size ", kV0Size<T>,
                                                   " (set it to sizeof)"));
  }
  return absl::OkStatus();
}

// *_init: zeroes the caller's struct_size bytes, then writes the defaults that fit.
template <typename T>
absl::Status InitVersioned(T* params, size_t struct_size, const T& defaults) {
  if (params == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(kStructName<T>, " is NULL"));
  if (struct_size > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(kStructName<T>, " size ", struct_size, " does not fit struct_size"));
  }
  if (absl::Status status = CheckStructSize<T>(struct_size); !status.ok()) return status;
  std::memset(params, 0, struct_size);
  std::memcpy(params, &defaults, std::min(struct_size, sizeof(T)));
  params->struct_size = static_cast<uint32_t>(struct_size);
  return absl::OkStatus();
}

// An input struct: `defaults` overwritten by the caller's first struct_size bytes; NULL
// means the defaults.
template <typename T>
absl::StatusOr<T> ReadVersioned(const T* params, const T& defaults) {
  if (params == nullptr) return defaults;
  if (absl::Status status = CheckStructSize<T>(params->struct_size); !status.ok()) return status;
  T value = defaults;
  std::memcpy(&value, params, std::min<size_t>(params->struct_size, sizeof(T)));
  value.struct_size = sizeof(T);
  return value;
}

// An output struct, checked before the work is done so that a bad one changes nothing.
template <typename T>
absl::Status CheckOutput(const T* out) {
  if (out == nullptr) return absl::InvalidArgumentError(absl::StrCat(kStructName<T>, " is NULL"));
  return CheckStructSize<T>(out->struct_size);
}

// Writes `value` into at most out->struct_size bytes, keeping the caller's struct_size.
template <typename T>
void WriteVersioned(const T& value, T* out) {
  const uint32_t struct_size = out->struct_size;
  std::memcpy(out, &value, std::min<size_t>(struct_size, sizeof(T)));
  out->struct_size = struct_size;
}

}  // namespace pulse::capi
