#include "core/backend/cuda/launch.cuh"

#include <array>
#include <atomic>

namespace pulse::cuda {

bool ProgrammaticLaunchSupported() {
  // Per device: 0 unknown, 1 no, 2 yes.
  static std::array<std::atomic<int8_t>, 64> supported = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 ||
      device >= static_cast<int>(supported.size())) {
    return false;
  }
  int8_t known = supported[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (known == 0) {
    int major = 0;
    const bool yes =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        major >= 9;
    known = yes ? 2 : 1;
    supported[static_cast<size_t>(device)].store(known, std::memory_order_relaxed);
  }
  return known == 2;
}

}  // namespace pulse::cuda
