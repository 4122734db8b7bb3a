// Run-time CPU feature detection: kernels pick AVX2+FMA paths only when the CPU has them.
// OKAPI_FORCE_SCALAR=1 in the environment forces the scalar reference kernels.
#pragma once

namespace okapi {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  // All of AVX2, FMA and F16C (what our avx2/ kernels are compiled for), and not forced off.
  bool use_avx2() const { return avx2 && fma && f16c; }
};

const CpuFeatures& cpu_features();

}  // namespace okapi
