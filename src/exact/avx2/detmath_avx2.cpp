// det::exp on four lanes. Each step below is the scalar code's step (detmath.cpp) on every lane:
// the same IEEE double operations in the same order, no FMA (separate _mm256_mul_pd and
// _mm256_add_pd), so each lane's result has the scalar result's bits.
#include "exact/avx2/detmath_avx2.hpp"

#include <immintrin.h>

#include "exact/detmath.hpp"
#include "exact/detmath_constants.hpp"

namespace okapi::exact::avx2 {

namespace {

using namespace det::detail;

// Lanes in [-708, 708]: k in [-1021, 1021], so 2^k is a normal double and one multiplication
// scales (the scalar code's `k >= -1021` branch).
constexpr double kSafeLimit = 708.0;

__m256d exp4(__m256d x) {
  const __m256d sign_mask = _mm256_set1_pd(-0.0);
  const __m256d a = _mm256_andnot_pd(sign_mask, x);
  // k = a > ln2/2 ? round_half_away(x / ln2) : 0, as an integer-valued double.
  const __m256d v = _mm256_mul_pd(x, _mm256_set1_pd(kInvLn2));
  const __m256d v_abs = _mm256_andnot_pd(sign_mask, v);
  const __m256d t = _mm256_round_pd(_mm256_add_pd(v_abs, _mm256_set1_pd(0.5)), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256d t_signed = _mm256_or_pd(t, _mm256_and_pd(v, sign_mask));  // t >= 1 wherever it is used
  const __m256d kd = _mm256_and_pd(t_signed, _mm256_cmp_pd(a, _mm256_set1_pd(kHalfLn2), _CMP_GT_OQ));
  const __m128i k_int = _mm256_cvttpd_epi32(kd);
  const __m256d hi = _mm256_sub_pd(x, _mm256_mul_pd(kd, _mm256_set1_pd(kLn2Hi)));
  const __m256d lo = _mm256_mul_pd(kd, _mm256_set1_pd(kLn2Lo));
  const __m256d r = _mm256_sub_pd(hi, lo);
  // c = r - t (P1 + t (P2 + t (P3 + t (P4 + t P5)))), t = r^2
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d p = _mm256_mul_pd(r2, _mm256_set1_pd(kExpP5));
  p = _mm256_mul_pd(r2, _mm256_add_pd(_mm256_set1_pd(kExpP4), p));
  p = _mm256_mul_pd(r2, _mm256_add_pd(_mm256_set1_pd(kExpP3), p));
  p = _mm256_mul_pd(r2, _mm256_add_pd(_mm256_set1_pd(kExpP2), p));
  p = _mm256_mul_pd(r2, _mm256_add_pd(_mm256_set1_pd(kExpP1), p));
  const __m256d c = _mm256_sub_pd(r, p);
  // y = 1 - ((lo - (r c) / (2 - c)) - hi)
  const __m256d q = _mm256_div_pd(_mm256_mul_pd(r, c), _mm256_sub_pd(_mm256_set1_pd(2.0), c));
  const __m256d y = _mm256_sub_pd(_mm256_set1_pd(1.0), _mm256_sub_pd(_mm256_sub_pd(lo, q), hi));
  // 2^k from its bit pattern: (k + 1023) << 52.
  const __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(k_int), _mm256_set1_epi64x(1023)), 52);
  const __m256d scaled = _mm256_mul_pd(y, _mm256_castsi256_pd(bits));
  // |x| < 2^-28: 1 + x.
  const __m256d tiny = _mm256_cmp_pd(a, _mm256_set1_pd(kExpTiny), _CMP_LT_OQ);
  return _mm256_blendv_pd(scaled, _mm256_add_pd(_mm256_set1_pd(1.0), x), tiny);
}

}  // namespace

std::int64_t exp_in_place(double* x, std::int64_t n) {
  const __m256d limit = _mm256_set1_pd(kSafeLimit);
  const __m256d sign_mask = _mm256_set1_pd(-0.0);
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_loadu_pd(x + i);
    // Not (|v| <= 708): NaN or beyond the single-multiplication range -> the scalar code.
    const __m256d ordinary = _mm256_cmp_pd(_mm256_andnot_pd(sign_mask, v), limit, _CMP_LE_OQ);
    if (_mm256_movemask_pd(ordinary) != 0xf) {
      for (int j = 0; j < 4; ++j) x[i + j] = det::exp(x[i + j]);
      continue;
    }
    _mm256_storeu_pd(x + i, exp4(v));
  }
  return i;
}

}  // namespace okapi::exact::avx2
