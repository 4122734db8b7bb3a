// The float GEMM on AVX-512 F (kernels/float_gemm_tier.hpp): a 6 x 64 micro-kernel (24 zmm
// accumulators). Only after isa() >= Isa::avx512.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/half.hpp"
#include "kernels/float_gemm.hpp"

namespace okapi::kernels::avx512 {
namespace {

using V = __m512;

struct S {
  static constexpr int kLanes = 16, kNv = 4, kMr = 6;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  // The zero-masked forms: GCC 12 warns that the plain ones' "undefined" passthrough is uninitialized.
  static V load_f16(const uint16_t* p) {
    return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load_bf16(const uint16_t* p) {
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, wide, 16));
  }
  static V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V through_f16(V v) {
    return _mm512_maskz_cvtph_ps(0xFFFF, _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

#include "kernels/float_gemm_tier.hpp"

}  // namespace

void float_gemm_tile(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, uint64_t call_id) {
  strided_tile(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, accumulate, call_id);
}

quant::RowGroupKernels float_row_groups(DType type) { return row_groups_of(type); }

}  // namespace okapi::kernels::avx512
