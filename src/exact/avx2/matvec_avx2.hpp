// AVX2 Z[w] matvec with int64 accumulators. Callers check cpu_features().use_avx2(), that every
// part fits int32 (_mm256_mul_epi32 reads the low 32 bits) and that the int64 bound holds.
#pragma once
#include <cstdint>
#include <span>

#include "exact/matvec.hpp"

namespace okapi::exact::avx2 {

void matvec_int64(const ZMatrix& w, std::span<const std::int64_t> x, std::span<ZOmegaWide> y);

}  // namespace okapi::exact::avx2
