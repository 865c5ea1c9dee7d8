#include "core/backend/cpu/kernels.h"

#include <cassert>

namespace pulse::cpu {

const CpuKernels& CpuKernelsFor(CpuLevel level) {
  level = ResolveCpuLevel(level);
  assert(CpuLevelSupported(level));
  switch (level) {
#if defined(__x86_64__)
    case CpuLevel::kAvx512:
      return Avx512CpuKernels();
    case CpuLevel::kAvx2:
      return Avx2CpuKernels();
#endif
    default:
      return GenericCpuKernels();
  }
}

}  // namespace pulse::cpu
