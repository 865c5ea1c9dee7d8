// The collectives of tensor parallelism (docs/design/tensor-parallel.md): `size` ranks, each a
// thread driving its own backend, call the same collectives in the same order with the same
// sizes. Like a backend op, a collective is enqueued on the calling rank's compute stream after
// the ops enqueued before it (the in-process one runs on the calling thread at once), and its
// failure is recorded for TakeStatus rather than returned. All pointers are the rank's backend
// memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/status.h"

namespace pulse {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // out [rows][size][row_bytes]: row i of rank r's `in` ([rows][row_bytes]) lands at (i, r).
  // `out` must not overlap `in`.
  virtual void AllGather(const void* in, int64_t rows, size_t row_bytes, void* out) = 0;
  // out[i] = the ranks' in[i] added in rank order, in fp32. `out` must not overlap `in`.
  virtual void AllReduceSum(const float* in, int64_t count, float* out) = 0;

  // For a rank that leaves a step before its collectives: from now until Reset, every
  // collective of every rank of the group fails (Aborted) at once instead of waiting for it.
  // Any thread may call it.
  virtual void Abort() = 0;
  // Between steps, with no rank inside a collective: the group's collectives work again.
  virtual void Reset() = 0;
  // The first failure of this rank's collectives since the last call; OK when there was none.
  virtual absl::Status TakeStatus() = 0;
};

}  // namespace pulse
