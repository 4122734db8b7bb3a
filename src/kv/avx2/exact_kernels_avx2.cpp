#include "kv/avx2/exact_kernels_avx2.hpp"

#include <immintrin.h>

#include <limits>

#include "kv/exact_kernels.hpp"

namespace okapi::kv::avx2 {

namespace {

// Adds the eight int32 lanes of v, sign-extended, to the four int64 lanes of acc (twice).
inline __m256i add_widened(__m256i acc, __m256i v) {
  acc = _mm256_add_epi64(acc, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)));
  return _mm256_add_epi64(acc, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
}

inline std::int64_t horizontal_sum(__m256i v) {
  const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return _mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1);
}

inline __m256i load16(const std::int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

}  // namespace

// max is exact and |x| has no signed zeros, so the lane order does not matter.
bool max_abs_finite(const float* x, std::int64_t n, float* max_abs) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 largest = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 m = _mm256_setzero_ps();
  __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(a, largest, _CMP_LE_OQ));  // false for NaN and inf
    m = _mm256_max_ps(m, a);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float result = 0.0f;
  for (float v : lanes) result = v > result ? v : result;
  bool finite = _mm256_movemask_ps(ok) == 0xff;
  for (; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    finite &= a <= std::numeric_limits<float>::max();
    result = a > result ? a : result;
  }
  *max_abs = result;
  return finite;
}

// The scalar steps lane by lane: divide, clamp to +-32767, truncate, compare the (exact)
// fraction with +-0.5. A compare mask is -1 where true, so subtracting it adds one.
void quantize_int16(const float* x, std::int64_t n, float scale, std::int16_t* out) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 hi = _mm256_set1_ps(static_cast<float>(kExactIntMax));
  const __m256 lo = _mm256_set1_ps(-static_cast<float>(kExactIntMax));
  const __m256 half = _mm256_set1_ps(0.5f), minus_half = _mm256_set1_ps(-0.5f);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = _mm256_div_ps(_mm256_loadu_ps(x + i), s);
    y = _mm256_max_ps(lo, _mm256_min_ps(hi, y));
    __m256i t = _mm256_cvttps_epi32(y);
    const __m256 fraction = _mm256_sub_ps(y, _mm256_cvtepi32_ps(t));
    t = _mm256_sub_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(fraction, half, _CMP_GE_OQ)));
    t = _mm256_add_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(fraction, minus_half, _CMP_LE_OQ)));
    const __m128i packed = _mm_packs_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = static_cast<std::int16_t>(round_half_away_clamped(x[i] / scale));
}

// _mm256_madd_epi16 gives a0 b0 + a1 b1 per int32 lane; with |a|, |b| <= 32767 that is at most
// 2 * 32767^2 < 2^31, so it never wraps. Each lane is then widened into int64 before adding.
void dots_int16(const std::int16_t* q, const std::int16_t* rows, std::int64_t stride, std::int64_t count,
                std::int64_t n, std::int64_t* out) {
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int16_t* row = rows + j * stride;
    __m256i acc0 = _mm256_setzero_si256();
    __m256i acc1 = _mm256_setzero_si256();
    std::int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      acc0 = add_widened(acc0, _mm256_madd_epi16(load16(q + i), load16(row + i)));
      acc1 = add_widened(acc1, _mm256_madd_epi16(load16(q + i + 16), load16(row + i + 16)));
    }
    if (i < n) acc0 = add_widened(acc0, _mm256_madd_epi16(load16(q + i), load16(row + i)));
    out[j] = horizontal_sum(_mm256_add_epi64(acc0, acc1));
  }
}

// Two rows at a time: interleaving rows j and j+1 element by element and multiplying with the
// pair (p_j, p_j+1) makes madd produce p_j v_j[d] + p_j+1 v_j+1[d] per int32 lane (< 2^31 as
// above). unpacklo/hi work inside 128-bit halves, so lo holds d = 0-3 | 8-11, hi d = 4-7 | 12-15.
void weighted_sum_int16(const std::int16_t* p, const std::int16_t* rows, std::int64_t stride, std::int64_t count,
                        std::int64_t n, std::int64_t* acc) {
  for (std::int64_t j = 0; j < count; j += 2) {
    const bool pair = j + 1 < count;
    const std::int16_t* a_row = rows + j * stride;
    const std::int16_t* b_row = pair ? a_row + stride : a_row;
    const auto pa = static_cast<std::uint16_t>(p[j]);
    const auto pb = static_cast<std::uint16_t>(pair ? p[j + 1] : 0);
    const __m256i weights = _mm256_set1_epi32(static_cast<int>((static_cast<std::uint32_t>(pb) << 16) | pa));
    for (std::int64_t d = 0; d < n; d += 16) {
      const __m256i a = load16(a_row + d);
      const __m256i b = load16(b_row + d);
      const __m256i lo = _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), weights);
      const __m256i hi = _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), weights);
      auto* out = reinterpret_cast<__m256i*>(acc + d);
      auto add = [](__m256i* dst, __m128i v) {
        _mm256_storeu_si256(dst, _mm256_add_epi64(_mm256_loadu_si256(dst), _mm256_cvtepi32_epi64(v)));
      };
      add(out + 0, _mm256_castsi256_si128(lo));       // d 0-3
      add(out + 1, _mm256_castsi256_si128(hi));       // d 4-7
      add(out + 2, _mm256_extracti128_si256(lo, 1));  // d 8-11
      add(out + 3, _mm256_extracti128_si256(hi, 1));  // d 12-15
    }
  }
}

}  // namespace okapi::kv::avx2
