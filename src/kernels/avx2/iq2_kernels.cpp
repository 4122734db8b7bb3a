// IQ2_XXS, IQ2_XS, IQ2_S: AVX2 dot products with Q8_K activations. Per 32 values the four grid
// points are loaded as one vector, their signs applied as 64-bit byte masks from a table (indexed
// by the sign byte or the 7-bit sign index), and the signed values (|v| <= 43) meet the activations
// in maddubs as |a| * (v * sign(a)): exact for every int8 level, -128 included. The per-16 or
// per-32 scales (2s + 1) multiply the int16 pair sums in madd; a block's int32 sum is exact, and
// the float steps are the reference's (sum += (d_w * d_a) * bsum per block, then * 1/8), so the
// result is the scalar reference's bit for bit. The multi-token tile decodes each super-block of a
// row once for up to 8 tokens, with the same per-token steps.
#include <algorithm>
#include <vector>

#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq2_blocks.hpp"
#include "kernels/scalar/iq_grids.hpp"

namespace okapi::quant::avx2 {
namespace {

// Sign masks of a sign byte: byte j is 0xff when bit j is set.
constexpr uint64_t byte_mask(unsigned signs) {
  uint64_t m = 0;
  for (int j = 0; j < 8; ++j) {
    if ((signs >> j) & 1) m |= uint64_t{0xff} << (8 * j);
  }
  return m;
}
// ... of a full sign byte (IQ2_S), and of a 7-bit sign index whose eighth sign makes the number of
// negatives even (IQ2_XXS, IQ2_XS: ksigns_iq2xs).
struct SignMasks {
  uint64_t byte[256];
  uint64_t even[128];
  constexpr SignMasks() : byte(), even() {
    for (unsigned s = 0; s < 256; ++s) byte[s] = byte_mask(s);
    for (unsigned s = 0; s < 128; ++s) {
      unsigned parity = 0;
      for (int j = 0; j < 7; ++j) parity ^= (s >> j) & 1;
      even[s] = byte_mask(s | parity << 7);
    }
  }
};
constexpr SignMasks kMasks;

// The 32 signed values of four groups: grid points g0..g3, sign masks m0..m3.
__m256i signed_values(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, uint64_t m0, uint64_t m1, uint64_t m2,
                      uint64_t m3) {
  const __m256i grid = _mm256_set_epi64x(static_cast<long long>(g3), static_cast<long long>(g2),
                                         static_cast<long long>(g1), static_cast<long long>(g0));
  const __m256i neg = _mm256_set_epi64x(static_cast<long long>(m3), static_cast<long long>(m2),
                                        static_cast<long long>(m1), static_cast<long long>(m0));
  return _mm256_sub_epi8(_mm256_xor_si256(grid, neg), neg);
}

// int16 sums of adjacent products v * a (exact: |a| <= 128, |v| <= 43).
__m256i pair_sums(__m256i v, const int8_t* a) {
  const __m256i q8 = load256(a);
  return _mm256_maddubs_epi16(_mm256_abs_epi8(q8), _mm256_sign_epi8(v, q8));
}

// Scale factors 2s + 1 of the two 16-value halves of 32 values, as int16 lanes.
__m256i half_scales(int s_low, int s_high) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(2 * s_high + 1)),
                          _mm_set1_epi16(static_cast<int16_t>(2 * s_low + 1)));
}

// 32 values ib of a super-block: signed values and int16 scale factors.
void decode32(const block_iq2_xxs& x, int ib, __m256i* values, __m256i* scales) {
  const auto* qs = reinterpret_cast<const uint8_t*>(x.qs);
  uint32_t idx, sgn;
  std::memcpy(&idx, qs + 8 * ib, 4);
  std::memcpy(&sgn, qs + 8 * ib + 4, 4);
  const auto grid = [&](int k) { return iq::kIq2xxsGrid[(idx >> (8 * k)) & 0xFF]; };
  const auto mask = [&](int k) { return kMasks.even[(sgn >> (7 * k)) & 127]; };
  *values = signed_values(grid(0), grid(1), grid(2), grid(3), mask(0), mask(1), mask(2), mask(3));
  *scales = _mm256_set1_epi16(static_cast<int16_t>(2 * static_cast<int>(sgn >> 28) + 1));
}

void decode32(const block_iq2_xs& x, int ib, __m256i* values, __m256i* scales) {
  const uint16_t* q = x.qs + 4 * ib;
  const auto grid = [&](int k) { return iq::kIq2xsGrid[q[k] & 511]; };
  const auto mask = [&](int k) { return kMasks.even[q[k] >> 9]; };
  *values = signed_values(grid(0), grid(1), grid(2), grid(3), mask(0), mask(1), mask(2), mask(3));
  *scales = half_scales(x.scales[ib] & 0xF, x.scales[ib] >> 4);
}

void decode32(const block_iq2_s& x, int ib, __m256i* values, __m256i* scales) {
  const uint8_t* q = x.qs + 4 * ib;
  const uint8_t* s = x.qs + QK_K / 8 + 4 * ib;
  const int qh = x.qh[ib];
  const auto grid = [&](int k) { return iq::kIq2sGrid[q[k] | ((qh >> (2 * k)) & 3) << 8]; };
  const auto mask = [&](int k) { return kMasks.byte[s[k]]; };
  *values = signed_values(grid(0), grid(1), grid(2), grid(3), mask(0), mask(1), mask(2), mask(3));
  *scales = half_scales(x.scales[ib] & 0xF, x.scales[ib] >> 4);
}

// One super-block decoded (the tiles reuse it across tokens).
struct Decoded {
  __m256i values[QK_K / 32];
  __m256i scales[QK_K / 32];
};

template <typename Block>
void decode(const Block& x, Decoded& out) {
  for (int ib = 0; ib < QK_K / 32; ++ib) decode32(x, ib, &out.values[ib], &out.scales[ib]);
}

// The exact int32 sum of a decoded super-block with 256 activation levels.
int32_t block_sum(const Decoded& w, const int8_t* q8) {
  __m256i acc = _mm256_setzero_si256();
  for (int ib = 0; ib < QK_K / 32; ++ib) {
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pair_sums(w.values[ib], q8 + 32 * ib), w.scales[ib]));
  }
  return hsum_i32(acc);
}

template <typename Block>
float dot(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      __m256i values, scales;
      decode32(x[i], ib, &values, &scales);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pair_sums(values, y[i].qs + 32 * ib), scales));
    }
    const float d = half_to_float(x[i].d) * y[i].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return 0.125f * sumf;
}

// Multi-token tile: each super-block of a row decoded once for up to kTokens tokens; per (row,
// token) the float steps are dot's, so a batched row equals the single-token result bit for bit.
template <typename Block>
void tile(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row, const float*,
          int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  constexpr int64_t kTokens = 8;
  const int64_t nb = n / QK_K;
  Decoded dec;
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* x = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_row);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens) {
      const int64_t nt = std::min(kTokens, n_tokens - t0);
      float sumf[kTokens] = {};
      for (int64_t i = 0; i < nb; ++i) {
        decode(x[i], dec);
        const float dw = half_to_float(x[i].d);
        for (int64_t t = 0; t < nt; ++t) {
          const auto* yb = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t0 + t) * a_row) + i;
          const float d = dw * yb->d;
          sumf[t] += d * static_cast<float>(block_sum(dec, yb->qs));
        }
      }
      for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r] = scale * (0.125f * sumf[t]);
    }
  }
}

}  // namespace
}  // namespace okapi::quant::avx2

namespace okapi::quant::detail {

void use_avx2_iq2_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.vec_dot_ref == nullptr || f.vec_dot_type != DType::Q8_K) continue;
    if (f.type == DType::IQ2_XXS) {
      f.vec_dot = avx2::dot<block_iq2_xxs>;
      f.tiles = {avx2::tile<block_iq2_xxs>, false};
    }
    if (f.type == DType::IQ2_XS) {
      f.vec_dot = avx2::dot<block_iq2_xs>;
      f.tiles = {avx2::tile<block_iq2_xs>, false};
    }
    if (f.type == DType::IQ2_S) {
      f.vec_dot = avx2::dot<block_iq2_s>;
      f.tiles = {avx2::tile<block_iq2_s>, false};
    }
  }
}

}  // namespace okapi::quant::detail
