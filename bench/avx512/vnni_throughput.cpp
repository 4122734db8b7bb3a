// The instruction timings the avx512 row-group kernels were shaped by (bench/isa_bench.cpp drives
// them). Compiled with the avx512 tier's flags; plain functions only (no benchmark.h: its inline
// code must not be compiled for AVX-512 here and picked by the linker for other files).
#include "avx512/vnni_throughput.hpp"

#include "kernels/avx512/simd.hpp"

namespace okapi::bench::avx512 {
namespace {

template <typename V, int kChains, typename Op>
int64_t chains(int64_t iterations, V a, V b, Op op, int64_t (*reduce)(V)) {
  asm volatile("" : "+v"(a), "+v"(b));  // opaque inputs: nothing to fold at compile time
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = a;
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = op(acc[i], a, b);
  }
  int64_t sum = 0;
  for (int i = 0; i < kChains; ++i) sum += reduce(acc[i]);
  return sum;
}

int64_t reduce512(__m512i v) { return _mm512_reduce_add_epi32(v); }
int64_t reduce256(__m256i v) { return _mm256_extract_epi32(v, 0) + _mm256_extract_epi32(v, 7); }
int64_t reduce512f(__m512 v) { return static_cast<int64_t>(_mm512_reduce_add_ps(v)); }

template <int kChains>
int64_t run(Unit unit, int64_t iterations) {
  const __m512i a = _mm512_set1_epi32(0x01020304), b = _mm512_set1_epi32(0x01010101);
  const __m256i a8 = _mm512_castsi512_si256(a), b8 = _mm512_castsi512_si256(b);
  switch (unit) {
    case Unit::dpbusd_zmm:
      return chains<__m512i, kChains>(
          iterations, a, b, [](__m512i c, __m512i x, __m512i y) { return _mm512_dpbusd_epi32(c, x, y); }, reduce512);
    case Unit::dpbusd_ymm:
      return chains<__m256i, kChains>(
          iterations, a8, b8, [](__m256i c, __m256i x, __m256i y) { return _mm256_dpbusd_epi32(c, x, y); }, reduce256);
    case Unit::mullo_zmm:
      return chains<__m512i, kChains>(
          iterations, a, b, [](__m512i c, __m512i x, __m512i) { return _mm512_mullo_epi32(c, x); }, reduce512);
    case Unit::fma_zmm: {
      const __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(0.0f);
      return chains<__m512, kChains>(
          iterations, x, y, [](__m512 c, __m512 p, __m512 q) { return _mm512_fmadd_ps(c, p, q); }, reduce512f);
    }
  }
  return 0;
}

}  // namespace

int64_t dependent_chains(Unit unit, int n_chains, int64_t iterations) {
  switch (n_chains) {
    case 1:
      return run<1>(unit, iterations);
    case 4:
      return run<4>(unit, iterations);
    case 8:
      return run<8>(unit, iterations);
    default:
      return run<16>(unit, iterations);
  }
}

}  // namespace okapi::bench::avx512
