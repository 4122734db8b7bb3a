// AVX2 kernels of the 4-bit codebook formats: IQ4_XS (x Q8_K), MXFP4 and IQ4_NL (x Q8_0).
// A block's 32 nibbles become their int8 levels with one byte shuffle of the 16-entry codebook
// (IQ4: kvalues_iq4nl; MXFP4: the doubled E2M1 values, whose scale is halved), then
//   dequantize: scale * level, one rounded product each: bit-identical to the reference;
//   dot: the exact integer dot of levels and activations (maddubs with the sign trick: levels and
//        activations within +-127, pair sums <= 2 * 127 * 127), IQ4_XS's 6-bit block scales applied
//        in int32 (madd), then per block (IQ4_XS: super-block) acc = fma(d_w * d_a, float(dot), acc)
//        into two 8-lane sums. The reference sums the per-block floats in order, so the results
//        agree within a reordered float sum, not bit for bit.
// The multi-token tiles run the same per-token code for up to 4 tokens per pass over a weight row,
// so a batched result is the single-token vec_dot's bit for bit.
#include <cstring>
#include <vector>

#include "kernels/avx2/simd.hpp"
#include "kernels/avx2/token_groups.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq4_levels.hpp"
#include "kernels/scalar/mxfp4_levels.hpp"

namespace okapi::quant {
namespace avx2 {
namespace {

using detail::iq4_xs_block_scale;
using detail::kIq4Levels;
using detail::kMxfp4Levels;
using detail::mxfp4_half_scale;

__m256i codebook(const int8_t* levels) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels)));
}
// The 32 int8 levels of 16 bytes of nibbles (element j: low nibble of byte j, j + 16: high).
__m256i levels_of(__m256i book, const uint8_t* qs) { return _mm256_shuffle_epi8(book, nibbles_lo_hi(load128(qs))); }

// The 6-bit IQ4_XS block scale minus 32 of block ib.
int iq4_xs_scale(const block_iq4_xs& b, int ib) { return iq4_xs_block_scale(b.scales_l, b.scales_h, ib); }

// ---- The 32-element formats against Q8_0 ----

struct Iq4NlWeights {
  using Block = block_iq4_nl;
  static const int8_t* levels() { return kIq4Levels; }
  static float scale(const Block& b) { return half_to_float(b.d); }
};
struct Mxfp4Weights {
  using Block = block_mxfp4;
  static const int8_t* levels() { return kMxfp4Levels; }
  static float scale(const Block& b) { return mxfp4_half_scale(b.e); }
};

// out[t] = dot(weight row x, activation row t), t < G (Q8_0 rows a_row bytes apart).
template <typename W, int G>
void dot_q8_0_tokens(int64_t nb, const typename W::Block* x, const uint8_t* a, size_t a_row, float* out) {
  const __m256i book = codebook(W::levels());
  __m256 acc[G][2];
  for (int t = 0; t < G; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i q = levels_of(book, x[b].qs);
    const float d_w = W::scale(x[b]);
    for (int t = 0; t < G; ++t) {
      const auto& y = reinterpret_cast<const block_q8_0*>(a + static_cast<size_t>(t) * a_row)[b];
      const __m256i sum = sum_i16_pairs(dot_i8_pairs(q, load256(y.qs)));
      acc[t][b % 2] = _mm256_fmadd_ps(_mm256_set1_ps(d_w * half_to_float(y.d)), _mm256_cvtepi32_ps(sum), acc[t][b % 2]);
    }
  }
  for (int t = 0; t < G; ++t) out[t] = hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
}

template <typename W>
float vec_dot_q8_0(int64_t n, const void* w, const void* a) {
  float out;
  dot_q8_0_tokens<W, 1>(n / 32, static_cast<const typename W::Block*>(w), static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

template <typename W>
void dequantize_32(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const typename W::Block*>(src);
  const __m256i book = codebook(W::levels());
  for (int64_t b = 0; b < n / 32; ++b) store_scaled_i8x32(levels_of(book, x[b].qs), _mm256_set1_ps(W::scale(x[b])), dst + b * 32);
}

// ---- IQ4_XS against Q8_K ----

template <int G>
void dot_iq4_xs_tokens(int64_t nb, const block_iq4_xs* x, const uint8_t* a, size_t a_row, float* out) {
  const __m256i book = codebook(kIq4Levels);
  __m256 acc[G][2];
  for (int t = 0; t < G; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i sum[G];
    for (int t = 0; t < G; ++t) sum[t] = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const __m256i q = levels_of(book, x[b].qs + 16 * ib);
      const __m256i ls = _mm256_set1_epi16(static_cast<int16_t>(iq4_xs_scale(x[b], ib)));
      for (int t = 0; t < G; ++t) {
        const auto& y = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row)[b];
        sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(dot_i8_pairs(q, load256(y.qs + 32 * ib)), ls));
      }
    }
    const float d_w = half_to_float(x[b].d);
    for (int t = 0; t < G; ++t) {
      const auto& y = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row)[b];
      acc[t][b % 2] = _mm256_fmadd_ps(_mm256_set1_ps(d_w * y.d), _mm256_cvtepi32_ps(sum[t]), acc[t][b % 2]);
    }
  }
  for (int t = 0; t < G; ++t) out[t] = hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
}

float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a) {
  float out;
  dot_iq4_xs_tokens<1>(n / QK_K, static_cast<const block_iq4_xs*>(w), static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

void dequantize_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_iq4_xs*>(src);
  const __m256i book = codebook(kIq4Levels);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = half_to_float(x[b].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float dl = d * static_cast<float>(iq4_xs_scale(x[b], ib));
      store_scaled_i8x32(levels_of(book, x[b].qs + 16 * ib), _mm256_set1_ps(dl), dst + b * QK_K + 32 * ib);
    }
  }
}

// ---- Tiles ----

template <typename W>
struct Q8_0Dot {
  template <int G>
  struct Tokens {
    static void run(int64_t nb, const typename W::Block* x, const uint8_t* a, size_t a_row, float* out) {
      dot_q8_0_tokens<W, G>(nb, x, a, a_row, out);
    }
  };
};
template <int G>
struct Iq4XsTokens {
  static void run(int64_t nb, const block_iq4_xs* x, const uint8_t* a, size_t a_row, float* out) {
    dot_iq4_xs_tokens<G>(nb, x, a, a_row, out);
  }
};

template <typename W>
void tile_q8_0(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
               const float*, int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  kernels::avx2::tile_by_token_groups<typename W::Block, 32, Q8_0Dot<W>::template Tokens>(
      n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

void tile_iq4_xs(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                 const float*, int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  kernels::avx2::tile_by_token_groups<block_iq4_xs, QK_K, Iq4XsTokens>(n, w, w_row, n_rows, a, a_row, n_tokens,
                                                                       scale, y, y_stride);
}

}  // namespace
}  // namespace avx2

namespace detail {

void use_avx2_iq_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.dequantize_ref == nullptr || f.vec_dot_ref == nullptr) continue;
    if (f.type == DType::IQ4_XS && f.vec_dot_type == DType::Q8_K) {
      f.dequantize = avx2::dequantize_iq4_xs;
      f.vec_dot = avx2::vec_dot_iq4_xs_q8_K;
      f.tiles = {avx2::tile_iq4_xs, false};
    }
    if (f.type == DType::MXFP4 && f.vec_dot_type == DType::Q8_0) {
      f.dequantize = avx2::dequantize_32<avx2::Mxfp4Weights>;
      f.vec_dot = avx2::vec_dot_q8_0<avx2::Mxfp4Weights>;
      f.tiles = {avx2::tile_q8_0<avx2::Mxfp4Weights>, false};
    }
    if (f.type == DType::IQ4_NL && f.vec_dot_type == DType::Q8_0) {  // its dequantize: avx2/iq4_nl_kernels.cpp
      f.vec_dot = avx2::vec_dot_q8_0<avx2::Iq4NlWeights>;
      f.tiles = {avx2::tile_q8_0<avx2::Iq4NlWeights>, false};
    }
  }
}

}  // namespace detail
}  // namespace okapi::quant
