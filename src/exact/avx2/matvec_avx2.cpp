#include "exact/avx2/matvec_avx2.hpp"

#include <immintrin.h>

namespace okapi::exact::avx2 {

// Two elements per 256-bit load: w = [a0 b0 a1 b1], x = [c0 d0 c1 d1] (int64 lanes).
// _mm256_mul_epi32 multiplies the low signed 32 bits of each 64-bit lane into 64 bits:
//   mul(w, x)       = [a0c0, b0d0, a1c1, b1d1]
//   mul(w, swap(x)) = [a0d0, b0c0, a1d1, b1c1]   with swap(x) = [d0 c0 d1 c1]
// swap exchanges the 64-bit halves of each 128-bit lane: _MM_SHUFFLE(1,0,3,2) on 32-bit words.
// (Seed 000 used _MM_SHUFFLE(2,3,0,1), which swaps the 32-bit halves inside each 64-bit lane and
// so multiplies a by the sign word of c: not the cross terms.)
// Then rational = sum ac - 41 sum bd and w-part = sum ad + sum bc + sum bd, the same exact integers
// as the scalar kernel whenever the int64 bound holds, so the results are bit-identical.
void matvec_int64(const ZMatrix& w, std::span<const std::int64_t> x, std::span<ZOmegaWide> y) {
  const std::size_t n = w.cols;
  for (std::size_t r = 0; r < w.rows; ++r) {
    const std::int64_t* row = w.parts.data() + 2 * n * r;
    __m256i straight = _mm256_setzero_si256();
    __m256i crossed = _mm256_setzero_si256();
    std::size_t k = 0;
    for (; k + 2 <= n; k += 2) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.data() + 2 * k));
      const __m256i xs = _mm256_shuffle_epi32(xv, _MM_SHUFFLE(1, 0, 3, 2));
      straight = _mm256_add_epi64(straight, _mm256_mul_epi32(wv, xv));
      crossed = _mm256_add_epi64(crossed, _mm256_mul_epi32(wv, xs));
    }
    alignas(32) std::int64_t s[4];
    alignas(32) std::int64_t c[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(s), straight);
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), crossed);
    std::int64_t sum_ac = s[0] + s[2];
    std::int64_t sum_bd = s[1] + s[3];
    std::int64_t sum_cross = c[0] + c[1] + c[2] + c[3];
    for (; k < n; ++k) {  // odd tail
      const std::int64_t a = row[2 * k], b = row[2 * k + 1], xc = x[2 * k], xd = x[2 * k + 1];
      sum_ac += a * xc;
      sum_bd += b * xd;
      sum_cross += a * xd + b * xc;
    }
    y[r] = ZOmegaWide{sum_ac - kOmegaNormConstant * sum_bd, sum_cross + sum_bd};
  }
}

}  // namespace okapi::exact::avx2
