// Collectives between ranks that are threads of one process (the CPU backend's ranks): the
// ranks meet at a barrier, read each other's inputs and meet again before anyone may overwrite
// them. Sums add the ranks' values in rank order, so a result never depends on timing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend/communicator.h"
#include "core/base/status.h"

namespace pulse {

// One communicator a rank for a group of `size` ranks (InvalidArgument unless size >= 1):
// element r is rank r's, to be used by one thread at a time.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateThreadCommunicators(int32_t size);

}  // namespace pulse
