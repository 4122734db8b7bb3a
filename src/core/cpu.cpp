#include "core/cpu.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace okapi {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaves rather than __builtin_cpu_supports: clang 14 does not know "f16c" there, and we
// must also check that the OS saves the YMM registers (OSXSAVE + XCR0) before using AVX.
CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return f;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  const bool avx = (ecx & (1u << 28)) != 0;
  const bool fma = (ecx & (1u << 12)) != 0;
  const bool f16c = (ecx & (1u << 29)) != 0;
  bool ymm_enabled = false;
  if (osxsave) {
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    ymm_enabled = (xcr0_lo & 0x6u) == 0x6u;
  }
  if (!(avx && ymm_enabled)) return f;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    f.avx2 = (ebx & (1u << 5)) != 0;
  }
  f.fma = fma;
  f.f16c = f16c;
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    const char* force = std::getenv("OKAPI_FORCE_SCALAR");
    if (force != nullptr && force[0] != '\0' && std::strcmp(force, "0") != 0) return CpuFeatures{};
    return detect();
  }();
  return features;
}

}  // namespace okapi
