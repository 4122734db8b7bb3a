// The float GEMM on AVX2+FMA+F16C (kernels/float_gemm_tier.hpp): a 6 x 16 micro-kernel (12 ymm
// accumulators). Only after isa() >= Isa::avx2.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/half.hpp"
#include "kernels/float_gemm.hpp"

namespace okapi::kernels::avx2 {
namespace {

using V = __m256;

struct S {
  static constexpr int kLanes = 8, kNv = 2, kMr = 6;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V load_bf16(const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V through_f16(V v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
};

#include "kernels/float_gemm_tier.hpp"

}  // namespace

void float_gemm_tile(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, uint64_t call_id) {
  strided_tile(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, accumulate, call_id);
}

quant::RowGroupKernels float_row_groups(DType type) { return row_groups_of(type); }

}  // namespace okapi::kernels::avx2
