// Latency and throughput of the AVX-512 instructions the row-group kernels use. Call only when
// okapi::isa() is Isa::avx512. Declarations only.
#pragma once
#include <cstdint>

namespace okapi::bench::avx512 {

enum class Unit { dpbusd_zmm, dpbusd_ymm, mullo_zmm, fma_zmm };

// n_chains (1, 4, 8 or 16) independent chains of `iterations` dependent instructions each; returns
// a checksum. One chain measures the latency, many the throughput.
int64_t dependent_chains(Unit unit, int n_chains, int64_t iterations);

}  // namespace okapi::bench::avx512
