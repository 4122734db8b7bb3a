// IQ2_XXS, IQ2_XS, IQ2_S: AVX2 dot products with Q8_K activations. Per 32 values the four grid
// points are loaded as one vector, their signs applied from the sign bytes (spread to the lanes,
// compared against the bit of each lane), and the signed values (|v| <= 43) meet the activations
// in maddubs as |a| * (v * sign(a)): exact for every int8 level, -128 included. The per-16 or
// per-32 scales (2s + 1) multiply the int16 pair sums in madd; a block's int32 sum is exact, and
// the float steps are the reference's (sum += (d_w * d_a) * bsum per block, then * 1/8), so the
// result is the scalar reference's bit for bit.
#include <vector>

#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq2_blocks.hpp"
#include "kernels/scalar/iq_grids.hpp"

namespace okapi::quant::avx2 {
namespace {

// The 32 signed values of four groups: grid points g[0..3], sign byte k of `signs` for group k.
__m256i signed_values(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, uint32_t signs) {
  const __m256i grid = _mm256_set_epi64x(static_cast<long long>(g3), static_cast<long long>(g2),
                                         static_cast<long long>(g1), static_cast<long long>(g0));
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(signs)), spread);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_sub_epi8(_mm256_xor_si256(grid, neg), neg);
}

// int16 sums of adjacent products v * a (exact: |a| <= 128, |v| <= 43).
__m256i pair_sums(__m256i v, const int8_t* a) {
  const __m256i q8 = load256(a);
  return _mm256_maddubs_epi16(_mm256_abs_epi8(q8), _mm256_sign_epi8(v, q8));
}

uint32_t sign_bytes(uint8_t s0, uint8_t s1, uint8_t s2, uint8_t s3) {
  return static_cast<uint32_t>(s0) | static_cast<uint32_t>(s1) << 8 | static_cast<uint32_t>(s2) << 16 |
         static_cast<uint32_t>(s3) << 24;
}

// Scale factors 2s + 1 of the two 16-value halves of 32 values, as int16 lanes.
__m256i half_scales(int s_low, int s_high) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(2 * s_high + 1)),
                          _mm_set1_epi16(static_cast<int16_t>(2 * s_low + 1)));
}

float dot_iq2_xxs(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq2_xxs*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const auto* qs = reinterpret_cast<const uint8_t*>(x[i].qs);
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      uint32_t idx, sgn;
      std::memcpy(&idx, qs + 8 * ib, 4);
      std::memcpy(&sgn, qs + 8 * ib + 4, 4);
      const auto grid = [&](int k) { return iq::kIq2xxsGrid[(idx >> (8 * k)) & 0xFF]; };
      const auto sign = [&](int k) { return iq::kSigns[(sgn >> (7 * k)) & 127]; };
      const __m256i v = signed_values(grid(0), grid(1), grid(2), grid(3), sign_bytes(sign(0), sign(1), sign(2), sign(3)));
      const auto ls = static_cast<int16_t>(2 * static_cast<int>(sgn >> 28) + 1);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pair_sums(v, y[i].qs + 32 * ib), _mm256_set1_epi16(ls)));
    }
    const float d = half_to_float(x[i].d) * y[i].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return 0.125f * sumf;
}

float dot_iq2_xs(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq2_xs*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const uint16_t* q = x[i].qs + 4 * ib;
      const auto grid = [&](int k) { return iq::kIq2xsGrid[q[k] & 511]; };
      const auto sign = [&](int k) { return iq::kSigns[q[k] >> 9]; };
      const __m256i v = signed_values(grid(0), grid(1), grid(2), grid(3), sign_bytes(sign(0), sign(1), sign(2), sign(3)));
      const __m256i ls = half_scales(x[i].scales[ib] & 0xF, x[i].scales[ib] >> 4);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pair_sums(v, y[i].qs + 32 * ib), ls));
    }
    const float d = half_to_float(x[i].d) * y[i].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return 0.125f * sumf;
}

float dot_iq2_s(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq2_s*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const uint8_t* q = x[i].qs + 4 * ib;
      const int qh = x[i].qh[ib];
      const auto grid = [&](int k) { return iq::kIq2sGrid[q[k] | ((qh >> (2 * k)) & 3) << 8]; };
      uint32_t signs;
      std::memcpy(&signs, x[i].qs + QK_K / 8 + 4 * ib, 4);
      const __m256i v = signed_values(grid(0), grid(1), grid(2), grid(3), signs);
      const __m256i ls = half_scales(x[i].scales[ib] & 0xF, x[i].scales[ib] >> 4);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pair_sums(v, y[i].qs + 32 * ib), ls));
    }
    const float d = half_to_float(x[i].d) * y[i].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return 0.125f * sumf;
}

}  // namespace
}  // namespace okapi::quant::avx2

namespace okapi::quant::detail {

void use_avx2_iq2_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.vec_dot_ref == nullptr || f.vec_dot_type != DType::Q8_K) continue;
    if (f.type == DType::IQ2_XXS) f.vec_dot = avx2::dot_iq2_xxs;
    if (f.type == DType::IQ2_XS) f.vec_dot = avx2::dot_iq2_xs;
    if (f.type == DType::IQ2_S) f.vec_dot = avx2::dot_iq2_s;
  }
}

}  // namespace okapi::quant::detail
