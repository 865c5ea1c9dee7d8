// The CPU reference backend: fp32 math in plain C++, run synchronously on the calling thread and
// a thread pool (its "stream" is the caller, so Synchronize is a no-op and copies are memcpy).
//
// Every op computes each output row with a fixed summation order that depends only on the
// operand sizes (k, head_dim, the row's own kv length), never on the other rows in the call, m,
// or the thread count: a token's result is bitwise the same alone, batched, or in a chunked
// prefill. Rope computes cos/sin of double(positions[r]) * double(inv_freq[i]) in double precision
// and rounds them to float.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/backend/backend.h"

namespace pulse {

struct CpuBackendOptions {
  int32_t threads = 0;            // parallelism including the calling thread; 0: hardware cores
  size_t memory_limit_bytes = 0;  // 0: no limit; else Allocate beyond it is ResourceExhausted
};

absl::StatusOr<std::shared_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options);

}  // namespace pulse
