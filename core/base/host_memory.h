// How much memory the host has left for this process to take.
#pragma once

#include <cstdint>
#include <optional>

namespace pulse {

// The kernel's estimate of the memory that can be taken without swapping or reclaiming what
// processes use (MemAvailable in /proc/meminfo), in bytes; empty where the system does not say.
std::optional<int64_t> AvailableHostMemoryBytes();

}  // namespace pulse
