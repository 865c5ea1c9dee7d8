// The CPU reference backend: fp32 math in plain C++, run synchronously on the calling thread and
// a thread pool (its "stream" is the caller, so Synchronize is a no-op and copies are memcpy).
// Its copy engine is a thread of its own (cpu/copy_thread.h), so copy plans run beside compute
// and WaitForCopy really waits, as on a GPU.
//
// Every op computes each output row with a fixed summation order that depends only on the
// operand sizes (k, head_dim, the row's own kv length), never on the other rows in the call, m,
// or the thread count: a token's result is bitwise the same alone, batched, or in a chunked
// prefill. Rope computes cos/sin of double(positions[r]) * double(inv_freq[i]) in double precision
// and rounds them to float.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "core/backend/backend.h"
#include "core/backend/cpu/cpu_level.h"

namespace pulse {

struct CpuBackendOptions {
  int32_t threads = 0;            // parallelism including the calling thread; 0: hardware cores
  size_t memory_limit_bytes = 0;  // 0: no limit; else Allocate beyond it is ResourceExhausted
  size_t host_memory_limit_bytes = 0;  // the same for AllocateHost (the host tier)
  // The kernels' instruction-set level; one this CPU does not run fails CreateCpuBackend.
  cpu::CpuLevel kernel_level = cpu::CpuLevel::kBest;
  // For tests: every copy plan that moves data starts this long after the copy thread reaches
  // it, so that recall is late and compute waits for it (markers, plans without chunks, are not
  // delayed). Finite and >= 0.
  absl::Duration copy_delay = absl::ZeroDuration();
  // For tests: called with each copy plan that moves data, numbered 0, 1, ... in enqueue order;
  // true fails that plan (nothing of it is copied; waiting for it returns Internal), as a copy
  // engine fault would. Empty: no faults.
  std::function<bool(int64_t plan)> copy_fault = nullptr;
  // For tests: called with each offloaded layer's table build (BuildSparseTables with a slot
  // directory), numbered 0, 1, ...; true builds it as if no slot could be evicted, so every miss
  // of the layer finds none (the device tier exhausted in the middle of a step). Empty: none.
  std::function<bool(int64_t build)> slot_fault = nullptr;
};

absl::StatusOr<std::shared_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options);

}  // namespace pulse
