// IQ3_XXS, IQ3_S: AVX2 dot products with Q8_K. Per group of 32 values: the 8 grid points gathered
// into one vector of magnitudes (bytes), the 32 sign bits spread to bytes and put on the
// activations (vpsignb), vpmaddubsw, then vpmaddwd by the group's odd scale 2s + 1 into int32
// lanes. The integer sum of a super-block is exact, and the float steps are the reference's in
// its order (sum += (d_w * d_a) * float(sum)), so the results equal vec_dot_ref bit for bit.
#include <vector>

#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq3_grids.hpp"

namespace okapi::quant::avx2 {
namespace {

using iq3::block_iq3_s;
using iq3::block_iq3_xxs;

// The 32 activations of a group with the signs of 32 sign bits (bit j: value j negative) applied.
inline __m256i signed_activations(const int8_t* q8, uint32_t sign_bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(sign_bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_sign_epi8(load256(q8), _mm256_or_si256(negative, _mm256_set1_epi8(1)));
}

// scale * (magnitudes . signed activations) in 8 int32 lanes.
inline __m256i group_dot(__m256i magnitudes, __m256i activations, int scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, activations), _mm256_set1_epi16(static_cast<int16_t>(scale)));
}

float vec_dot_iq3_xxs_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq3_xxs*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* q = x[i].qs;
    __m256i acc = _mm256_setzero_si256();
    for (int g = 0; g < QK_K / 32; ++g, q += 8) {
      uint32_t word;
      std::memcpy(&word, x[i].qs + QK_K / 4 + 4 * g, sizeof(word));
      const uint32_t sign_bits = iq3::kSigns[word & 127] | iq3::kSigns[(word >> 7) & 127] << 8 |
                                 iq3::kSigns[(word >> 14) & 127] << 16 |
                                 static_cast<uint32_t>(iq3::kSigns[(word >> 21) & 127]) << 24;
      const __m256i magnitudes = _mm256_setr_epi32(
          static_cast<int32_t>(iq3::kXxsGrid[q[0]]), static_cast<int32_t>(iq3::kXxsGrid[q[1]]),
          static_cast<int32_t>(iq3::kXxsGrid[q[2]]), static_cast<int32_t>(iq3::kXxsGrid[q[3]]),
          static_cast<int32_t>(iq3::kXxsGrid[q[4]]), static_cast<int32_t>(iq3::kXxsGrid[q[5]]),
          static_cast<int32_t>(iq3::kXxsGrid[q[6]]), static_cast<int32_t>(iq3::kXxsGrid[q[7]]));
      acc = _mm256_add_epi32(acc, group_dot(magnitudes, signed_activations(y[i].qs + 32 * g, sign_bits),
                                            static_cast<int>(2 * (word >> 28) + 1)));
    }
    const float d = half_to_float(x[i].d) * y[i].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return 0.25f * sumf;
}

float vec_dot_iq3_s_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq3_s*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
    for (int g = 0; g < QK_K / 32; ++g) {
      const uint8_t* q = x[i].qs + 8 * g;
      const uint32_t high = x[i].qh[g];
      const auto point = [&](int k) { return static_cast<int32_t>(iq3::kSGrid[q[k] | ((high >> k) & 1) << 8]); };
      uint32_t sign_bits;
      std::memcpy(&sign_bits, x[i].signs + 4 * g, sizeof(sign_bits));
      const __m256i magnitudes =
          _mm256_setr_epi32(point(0), point(1), point(2), point(3), point(4), point(5), point(6), point(7));
      acc = _mm256_add_epi32(acc, group_dot(magnitudes, signed_activations(y[i].qs + 32 * g, sign_bits),
                                            2 * ((x[i].scales[g / 2] >> (4 * (g % 2))) & 0xf) + 1));
    }
    const float d = half_to_float(x[i].d) * y[i].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return sumf;
}

}  // namespace
}  // namespace okapi::quant::avx2

namespace okapi::quant::detail {

void use_avx2_iq3_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.vec_dot_type != DType::Q8_K || f.vec_dot_ref == nullptr) continue;
    if (f.type == DType::IQ3_XXS) f.vec_dot = avx2::vec_dot_iq3_xxs_q8_K;
    if (f.type == DType::IQ3_S) f.vec_dot = avx2::vec_dot_iq3_s_q8_K;
  }
}

}  // namespace okapi::quant::detail
