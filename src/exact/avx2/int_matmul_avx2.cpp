// AVX2 int16 dot products with exact int64 results; the overflow analysis is in
// exact/int_matmul.hpp (pair sums from _mm256_madd_epi16 split into hi/lo int32 lanes, summed
// across lanes and flushed to int64 every kPairsPerFlush pairs per lane).
#include "exact/avx2/int_matmul_avx2.hpp"

#include <immintrin.h>

#include <algorithm>

namespace okapi::exact::avx2 {
namespace {

// After K pairs per lane, the 8 lanes together hold |sum hi| <= 8 K 2^15 and sum lo <= 8 K (2^16 - 1):
// both <= 2^31 - 1 for K <= 4096, so even the sum over all lanes is exact in int32.
constexpr std::int64_t kPairsPerFlush = 4096;
static_assert(8 * kPairsPerFlush * 32768 <= INT32_MAX + std::int64_t{1} && 8 * kPairsPerFlush * 65535 <= INT32_MAX);
constexpr std::int64_t kElementsPerFlush = kPairsPerFlush * 16;  // one pair per lane per 16 elements

// 65536 * (sum of hi's lanes) + (sum of lo's lanes), the lane sums exact in int32 (see above).
std::int64_t combine(__m256i hi, __m256i lo) {
  __m256i h = _mm256_hadd_epi32(hi, lo);  // [h01 h23 l01 l23 | h45 h67 l45 l67]
  h = _mm256_hadd_epi32(h, h);            // [H0-3 L0-3 . . | H4-7 L4-7 . .]
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  return std::int64_t{_mm_cvtsi128_si32(s)} * 65536 + _mm_extract_epi32(s, 1);
}

// The same for four (hi, lo) pairs at once: [65536 H_p + L_p for p < 4] as int64 lanes.
__m256i combine4(const __m256i* hi, const __m256i* lo) {
  const auto lane_sums = [](const __m256i* v) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));  // [S0 S1 S2 S3]
  };
  const __m256i h = _mm256_cvtepi32_epi64(lane_sums(hi)), l = _mm256_cvtepi32_epi64(lane_sums(lo));
  return _mm256_add_epi64(_mm256_slli_epi64(h, 16), l);  // exact: |65536 H| < 2^47
}

// kW weight rows against kX activation rows (kW * kX <= 4 pairs): one pass over the rows feeds
// kW * kX madds per 16 elements. result[r * kX + t] = w[r] . x[t].
//
// Per pair and lane two int32 accumulators: hi = sum (m >> 16) and wrap = sum m (mod 2^32). The
// low halves lo = m & 0xffff are not summed separately: their exact sum L (0 <= L <= K (2^16 - 1)
// < 2^32) is recovered at the flush as L = wrap - 65536 hi (mod 2^32), since sum m = 65536 hi + L.
// This costs four vector operations per madd (madd, shift, two adds).
template <int kW, int kX>
void block(const std::int16_t* w, std::int64_t w_stride, const std::int16_t* x, std::int64_t x_stride,
           std::int64_t n, std::int64_t* result) {
  constexpr int kPairs = kW * kX;
  static_assert(kPairs <= 4);
  std::int64_t total[kPairs] = {};
  for (std::int64_t begin = 0; begin < n; begin += kElementsPerFlush) {
    const std::int64_t end = std::min(n, begin + kElementsPerFlush);
    __m256i hi[kPairs], wrap[kPairs];
    for (int p = 0; p < kPairs; ++p) hi[p] = wrap[p] = _mm256_setzero_si256();
    for (std::int64_t i = begin; i < end; i += 16) {
      for (int r = 0; r < kW; ++r) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * w_stride + i));
        for (int t = 0; t < kX; ++t) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + t * x_stride + i));
          const __m256i m = _mm256_madd_epi16(wv, xv);
          hi[r * kX + t] = _mm256_add_epi32(hi[r * kX + t], _mm256_srai_epi32(m, 16));
          wrap[r * kX + t] = _mm256_add_epi32(wrap[r * kX + t], m);
        }
      }
    }
    __m256i lo[kPairs];
    for (int p = 0; p < kPairs; ++p) lo[p] = _mm256_sub_epi32(wrap[p], _mm256_slli_epi32(hi[p], 16));
    if constexpr (kPairs == 4) {
      alignas(32) std::int64_t sums[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(sums), combine4(hi, lo));
      for (int p = 0; p < 4; ++p) total[p] += sums[p];
    } else {
      for (int p = 0; p < kPairs; ++p) total[p] += combine(hi[p], lo[p]);
    }
  }
  for (int p = 0; p < kPairs; ++p) result[p] = total[p];
}

// The scalar encoding on four doubles: trunc(|y| + 0.5) clamped to 32767, sign of y restored.
__m128i quantize4(__m256d y) {
  const __m256d sign_mask = _mm256_set1_pd(-0.0);
  const __m256d a = _mm256_andnot_pd(sign_mask, y);
  __m256d t = _mm256_round_pd(_mm256_add_pd(a, _mm256_set1_pd(0.5)), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  t = _mm256_min_pd(t, _mm256_set1_pd(32767.0));
  return _mm256_cvttpd_epi32(_mm256_or_pd(t, _mm256_and_pd(y, sign_mask)));
}

}  // namespace

bool max_abs_finite(const float* x, std::int64_t n, float* max_abs) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  __m256 best = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x + i));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // inf or NaN
    best = _mm256_max_ps(best, a);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, best);
  float m = 0.0f;
  for (const float v : lanes) m = std::max(m, v);
  bool finite = _mm256_movemask_ps(bad) == 0;
  for (; i < n; ++i) {
    const float a = x[i] < 0 ? -x[i] : x[i];
    if (!(a < __builtin_inff())) finite = false;
    m = std::max(m, a);
  }
  *max_abs = m;
  return finite;
}

std::int64_t quantize_row(const float* x, std::int64_t n, double inverse, std::int16_t* out) {
  const __m256d inv = _mm256_set1_pd(inverse);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m128i lo = quantize4(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), inv));
    const __m128i hi = quantize4(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packs_epi32(lo, hi));
  }
  return i;
}

void int16_dot_rows(const std::int16_t* w, const std::int16_t* x, std::int64_t x_stride, std::int64_t n_tokens,
                    std::int64_t n, std::int64_t* out) {
  std::int64_t t = 0;
  for (; t + 4 <= n_tokens; t += 4) block<1, 4>(w, 0, x + t * x_stride, x_stride, n, out + t);
  for (; t + 2 <= n_tokens; t += 2) block<1, 2>(w, 0, x + t * x_stride, x_stride, n, out + t);
  for (; t < n_tokens; ++t) block<1, 1>(w, 0, x + t * x_stride, x_stride, n, out + t);
}

void int16_matmul_rows(const std::int16_t* w, std::int64_t n_rows, const std::int16_t* x, std::int64_t n_tokens,
                       std::int64_t n, std::int64_t* out) {
  if (n_tokens >= 4) {  // prefill: one weight row against four tokens at a time
    for (std::int64_t r = 0; r < n_rows; ++r) int16_dot_rows(w + r * n, x, n, n_tokens, n, out + r * n_tokens);
    return;
  }
  // decode: four weight rows against one token at a time
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    std::int64_t r = 0;
    std::int64_t sums[4];
    for (; r + 4 <= n_rows; r += 4) {
      block<4, 1>(w + r * n, n, x + t * n, n, n, sums);
      for (int i = 0; i < 4; ++i) out[(r + i) * n_tokens + t] = sums[i];
    }
    for (; r < n_rows; ++r) block<1, 1>(w + r * n, n, x + t * n, n, n, out + r * n_tokens + t);
  }
}

}  // namespace okapi::exact::avx2
