#include "core/cpu.hpp"

#include <cstdlib>
#include <cstring>

namespace okapi {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
#endif
    const char* force = std::getenv("OKAPI_FORCE_SCALAR");
    if (force != nullptr && std::strcmp(force, "0") != 0 && force[0] != '\0') f = CpuFeatures{};
    return f;
  }();
  return features;
}

}  // namespace okapi
