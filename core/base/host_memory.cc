#include "core/base/host_memory.h"

#include <fstream>
#include <string>

namespace pulse {

std::optional<int64_t> AvailableHostMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace pulse
