// The instruction-set levels the CPU kernels are compiled for, and which of them this CPU runs.
// The library itself is built for the compiler's baseline; the kernels' sources are compiled
// once a level (core/backend/cpu/CMakeLists.txt) and one level is chosen when a backend is made.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace pulse::cpu {

enum class CpuLevel : uint8_t {
  kBest,     // the best level this CPU runs
  kGeneric,  // the compiler's baseline (x86-64: SSE2): multiply-adds round twice
  kAvx2,     // AVX2, FMA and F16C (x86-64-v3's vector part)
  kAvx512,   // AVX-512 F, BW, DQ, VL and VNNI, with the AVX2 level's
};

std::string_view CpuLevelName(CpuLevel level);
// "best", "generic", "avx2" or "avx512"; anything else is InvalidArgument.
absl::StatusOr<CpuLevel> ParseCpuLevel(std::string_view name);

// Whether this CPU (and this build) runs `level`; kBest always.
bool CpuLevelSupported(CpuLevel level);
// `level`, with kBest replaced by the best supported level.
CpuLevel ResolveCpuLevel(CpuLevel level);

}  // namespace pulse::cpu
