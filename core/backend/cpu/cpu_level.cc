#include "core/backend/cpu/cpu_level.h"

#include <string>

#include "absl/strings/str_cat.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace pulse::cpu {
namespace {

struct Features {
  bool avx2 = false;
  bool avx512 = false;
};

Features DetectFeatures() {
  Features features;
#if defined(__x86_64__)
  // F16C by cpuid: not every compiler's __builtin_cpu_supports knows it.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  features.avx2 = f16c && __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
  features.avx512 =
      features.avx2 && __builtin_cpu_supports("avx512f") != 0 &&
      __builtin_cpu_supports("avx512bw") != 0 && __builtin_cpu_supports("avx512dq") != 0 &&
      __builtin_cpu_supports("avx512vl") != 0 && __builtin_cpu_supports("avx512vnni") != 0;
#endif
  return features;
}

const Features& CpuFeatures() {
  static const Features features = DetectFeatures();
  return features;
}

}  // namespace

std::string_view CpuLevelName(CpuLevel level) {
  switch (level) {
    case CpuLevel::kBest:
      return "best";
    case CpuLevel::kGeneric:
      return "generic";
    case CpuLevel::kAvx2:
      return "avx2";
    case CpuLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

absl::StatusOr<CpuLevel> ParseCpuLevel(std::string_view name) {
  for (const CpuLevel level :
       {CpuLevel::kBest, CpuLevel::kGeneric, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (name == CpuLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "CPU kernel level must be best, generic, avx2 or avx512, got \"", std::string(name), "\""));
}

bool CpuLevelSupported(CpuLevel level) {
  switch (level) {
    case CpuLevel::kAvx512:
      return CpuFeatures().avx512;
    case CpuLevel::kAvx2:
      return CpuFeatures().avx2;
    default:
      return true;
  }
}

CpuLevel ResolveCpuLevel(CpuLevel level) {
  if (level != CpuLevel::kBest) return level;
  for (const CpuLevel candidate : {CpuLevel::kAvx512, CpuLevel::kAvx2}) {
    if (CpuLevelSupported(candidate)) return candidate;
  }
  return CpuLevel::kGeneric;
}

}  // namespace pulse::cpu
