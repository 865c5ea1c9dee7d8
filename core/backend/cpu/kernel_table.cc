// Compiled once a level (kernel_target.h): the table of that level's kernels.
#include "core/backend/cpu/attention.h"
#include "core/backend/cpu/block_bounds.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/kernel_target.h"
#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/norm.h"
#include "core/backend/cpu/pointwise.h"
#include "core/backend/cpu/rope.h"

#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
#define PULSE_CPU_LEVEL_KERNELS Avx512CpuKernels
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
#define PULSE_CPU_LEVEL_KERNELS Avx2CpuKernels
#else
#define PULSE_CPU_LEVEL_KERNELS GenericCpuKernels
#endif

namespace pulse::cpu {

const CpuKernels& PULSE_CPU_LEVEL_KERNELS() {
  static constexpr CpuKernels kKernels = {
      .embed = &Embed,
      .gemm = &Gemm,
      .rms_norm = &RmsNorm,
      .add_rms_norm = &AddRmsNorm,
      .rope = &Rope,
      .swiglu = &SwiGlu,
      .gather_rows = &GatherRows,
      .append_kv = &AppendKv,
      .attention = &Attention,
      .score_blocks = &ScoreBlocks,
  };
  return kKernels;
}

}  // namespace pulse::cpu
