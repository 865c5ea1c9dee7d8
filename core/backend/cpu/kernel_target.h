// The level a kernel source is being compiled for. core/backend/cpu/CMakeLists.txt compiles each
// kernel source once a level with PULSE_CPU_LEVEL set (a source compiled without it, a test for
// example, is the generic level). Kernel code sits between PULSE_CPU_KERNELS_BEGIN and
// PULSE_CPU_KERNELS_END: in an inline namespace named after the level, so that the levels' copies
// of one function, inline ones included, are distinct symbols; and under a target pragma rather
// than a -march flag, so that what the standard headers (included before BEGIN) instantiate stays
// at the baseline: a template instantiated from a level's code and kept by the linker would
// otherwise carry that level's instructions into every caller.
#pragma once

#define PULSE_CPU_LEVEL_GENERIC 0
#define PULSE_CPU_LEVEL_AVX2 1
#define PULSE_CPU_LEVEL_AVX512 2

#if !defined(PULSE_CPU_LEVEL)
#define PULSE_CPU_LEVEL PULSE_CPU_LEVEL_GENERIC
#endif

#define PULSE_CPU_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define PULSE_CPU_TARGET_PUSH(features) \
  PULSE_CPU_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define PULSE_CPU_TARGET_POP PULSE_CPU_PRAGMA(clang attribute pop)
#else
#define PULSE_CPU_TARGET_PUSH(features) \
  PULSE_CPU_PRAGMA(GCC push_options) PULSE_CPU_PRAGMA(GCC target(features))
#define PULSE_CPU_TARGET_POP PULSE_CPU_PRAGMA(GCC pop_options)
#endif

#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
#define PULSE_CPU_KERNELS_BEGIN                                                        \
  PULSE_CPU_TARGET_PUSH("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c") \
  namespace pulse::cpu {                                                               \
  inline namespace avx512 {
#define PULSE_CPU_KERNELS_END \
  }                           \
  }                           \
  PULSE_CPU_TARGET_POP
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
#define PULSE_CPU_KERNELS_BEGIN          \
  PULSE_CPU_TARGET_PUSH("avx2,fma,f16c") \
  namespace pulse::cpu {                 \
  inline namespace avx2 {
#define PULSE_CPU_KERNELS_END \
  }                           \
  }                           \
  PULSE_CPU_TARGET_POP
#else
#define PULSE_CPU_KERNELS_BEGIN \
  namespace pulse::cpu {        \
  inline namespace generic {
#define PULSE_CPU_KERNELS_END \
  }                           \
  }
#endif

// Whether the level has fused multiply-add.
#define PULSE_CPU_HAS_FMA (PULSE_CPU_LEVEL != PULSE_CPU_LEVEL_GENERIC)
