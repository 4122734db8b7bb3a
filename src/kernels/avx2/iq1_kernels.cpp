// IQ1_S, IQ1_M: AVX2 dot products with Q8_K. The codebook points are -1/0/1 bytes, so a point
// times the activations is vpsignb; vpmaddubsw by ones and vpmaddwd by the odd scales sum them
// into int32 lanes. IQ1_S takes its shift term from Q8_K's block sums as the reference does;
// IQ1_M signs the activations by each 8 values' shift bit the same way. The integer sums are exact
// and the float steps the reference's, so the results equal vec_dot_ref bit for bit.
#include <vector>

#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq1_grid.hpp"

namespace okapi::quant::avx2 {
namespace {

using iq1::block_iq1_m;
using iq1::block_iq1_s;

inline __m256i points(int i0, int i1, int i2, int i3) {
  return _mm256_setr_epi64x(static_cast<int64_t>(iq1::kGrid[i0]), static_cast<int64_t>(iq1::kGrid[i1]),
                            static_cast<int64_t>(iq1::kGrid[i2]), static_cast<int64_t>(iq1::kGrid[i3]));
}

// Sums of the signed bytes v in 16 int16 lanes (pairs).
inline __m256i byte_pairs(__m256i v) { return _mm256_maddubs_epi16(_mm256_set1_epi8(1), v); }

float vec_dot_iq1_s_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq1_s*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
    int sumi1 = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const int qh = x[i].qh[ib];
      const uint8_t* qs = x[i].qs + 4 * ib;
      const auto index = [&](int l) { return qs[l] | ((qh >> (3 * l)) & 7) << 8; };
      const int ls = 2 * ((qh >> 12) & 7) + 1;
      const __m256i prod = _mm256_sign_epi8(load256(y[i].qs + 32 * ib), points(index(0), index(1), index(2), index(3)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(byte_pairs(prod), _mm256_set1_epi16(static_cast<int16_t>(ls))));
      sumi1 += ls * (qh & 0x8000 ? -1 : 1) * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
    }
    const int sumi = hsum_i32(acc);
    sumf += half_to_float(x[i].d) * y[i].d * (static_cast<float>(sumi) + iq1::kDelta * static_cast<float>(sumi1));
  }
  return sumf;
}

float vec_dot_iq1_m_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq1_m*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, sizeof(sc));
    const auto d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                           (sc[3] & 0xf000));
    __m256i acc1 = _mm256_setzero_si256(), acc2 = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const uint8_t* qs = x[i].qs + 4 * ib;
      const uint8_t* qh = x[i].qh + 2 * ib;
      const auto nibble = [&](int l) { return qh[l / 2] >> (4 * (l % 2)); };
      const auto index = [&](int l) { return qs[l] | (nibble(l) & 7) << 8; };
      const auto shift = [&](int l) {
        return static_cast<int64_t>(nibble(l) & 8 ? 0xffffffffffffffffULL : 0x0101010101010101ULL);
      };
      const int ls1 = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
      const int ls2 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
      // int16 lanes 0..7 hold values 0..15 (scale ls1), lanes 8..15 values 16..31 (ls2)
      const __m256i scales = _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(ls1)),
                                               _mm_set1_epi16(static_cast<int16_t>(ls2)));
      const __m256i q8 = load256(y[i].qs + 32 * ib);
      const __m256i grid = _mm256_sign_epi8(q8, points(index(0), index(1), index(2), index(3)));
      const __m256i shifted = _mm256_sign_epi8(q8, _mm256_setr_epi64x(shift(0), shift(1), shift(2), shift(3)));
      acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(byte_pairs(grid), scales));
      acc2 = _mm256_add_epi32(acc2, _mm256_madd_epi16(byte_pairs(shifted), scales));
    }
    const int sumi1 = hsum_i32(acc1), sumi2 = hsum_i32(acc2);
    sumf += half_to_float(d16) * y[i].d * (static_cast<float>(sumi1) + iq1::kDelta * static_cast<float>(sumi2));
  }
  return sumf;
}

}  // namespace
}  // namespace okapi::quant::avx2

namespace okapi::quant::detail {

void use_avx2_iq1_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.vec_dot_type != DType::Q8_K || f.vec_dot_ref == nullptr) continue;
    if (f.type == DType::IQ1_S) f.vec_dot = avx2::vec_dot_iq1_s_q8_K;
    if (f.type == DType::IQ1_M) f.vec_dot = avx2::vec_dot_iq1_m_q8_K;
  }
}

}  // namespace okapi::quant::detail
