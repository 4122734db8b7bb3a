// Q4_K / Q6_K weights x Q8_K activations, 1-4 tokens per pass over a weight row, with the
// arithmetic of quant/avx2's vec_dot_q4_K_q8_K / vec_dot_q6_K_q8_K per token:
// Q4_K: isum = sum_j scale_j * dot(q_j, a_j) exactly in int32 lanes, the mins term
// sum_j min_j * (bsum_2j + bsum_2j+1) exactly, then acc += d*d_a*isum, acc_min += dmin*d_a*msum.
// Q6_K: levels q in 0..63 unsigned, isum = sum_g scale_g * dot(q, a) - 32 * sum_g scale_g * bsum_g
// exactly, then acc += d*d_a*isum.
#include "kernels/avx2/gemm_kquant.hpp"

#include "kernels/avx2/kquant_unpack.hpp"
#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"

namespace okapi::kernels::avx2 {
namespace {

using quant::block_q4_K;
using quant::block_q6_K;
using quant::block_q8_K;
using quant::QK_K;
using quant::avx2::half_to_float;
using quant::avx2::hsum;
using quant::avx2::hsum_i32;
using quant::avx2::load128;
using quant::avx2::load256;
using quant::avx2::Q6Quarters;
using quant::avx2::ScalesMins;
using quant::avx2::unpack_q4_K_scales;
using quant::avx2::unpack_q6_K_half;

template <int G>
void row_tokens_q4_K(int64_t n_blocks, const block_q4_K* x, const uint8_t* a, size_t a_row, float scale, float* y,
                int64_t y_stride) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc[G];
  float acc_min[G];
  for (int t = 0; t < G; ++t) {
    acc[t] = _mm256_setzero_ps();
    acc_min[t] = 0.0f;
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    const ScalesMins sm = unpack_q4_K_scales(x[b].scales);
    const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm.scales));
    const block_q8_K* y_b[G];
    for (int t = 0; t < G; ++t) y_b[t] = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row) + b;
    __m256i isum[G];
    for (int t = 0; t < G; ++t) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {  // 64 elements: low nibbles then high nibbles of 32 bytes
      const __m256i bytes = load256(x[b].qs + 32 * j);
      const __m256i lo_q = _mm256_and_si256(bytes, low4);
      const __m256i hi_q = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      // Scales 2j (low nibbles) and 2j+1 (high nibbles) as int16 in every lane: a byte shuffle.
      const auto pick_lo = static_cast<int16_t>(0x0100 + 0x0202 * (2 * j));
      const auto pick_hi = static_cast<int16_t>(0x0100 + 0x0202 * (2 * j + 1));
      const __m256i scale_lo = _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(pick_lo));
      const __m256i scale_hi = _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(pick_hi));
      for (int t = 0; t < G; ++t) {
        const int8_t* q8 = y_b[t]->qs;
        const __m256i lo = _mm256_maddubs_epi16(lo_q, load256(q8 + 64 * j));
        const __m256i hi = _mm256_maddubs_epi16(hi_q, load256(q8 + 64 * j + 32));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(lo, scale_lo));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(hi, scale_hi));
      }
    }
    const __m128i mins = _mm_cvtepu8_epi16(sm.mins);
    const float d = half_to_float(x[b].d), dmin = half_to_float(x[b].dmin);
    for (int t = 0; t < G; ++t) {
      const __m256i bs = load256(y_b[t]->bsums);
      const __m128i pair_sums = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const int32_t msum = hsum_i32(_mm_madd_epi16(pair_sums, mins));
      const float da = y_b[t]->d;
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * da), _mm256_cvtepi32_ps(isum[t]), acc[t]);
      acc_min[t] += dmin * da * static_cast<float>(msum);
    }
  }
  for (int t = 0; t < G; ++t) y[t * y_stride] = (hsum(acc[t]) - acc_min[t]) * scale;
}

template <int G>
void row_tokens_q6_K(int64_t n_blocks, const block_q6_K* x, const uint8_t* a, size_t a_row, float scale, float* y,
                     int64_t y_stride) {
  __m256 acc[G];
  for (int t = 0; t < G; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const block_q6_K& blk = x[b];
    const block_q8_K* y_b[G];
    for (int t = 0; t < G; ++t) y_b[t] = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row) + b;
    __m256i isum[G];
    for (int t = 0; t < G; ++t) isum[t] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      // Scale 2k for the low 128-bit lane (elements 0-15 of quarter k), 2k+1 for the high lane.
      const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales + 8 * half));
      const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
      const Q6Quarters levels = unpack_q6_K_half(blk, half);
      for (int k = 0; k < 4; ++k) {
        const int g = 8 * half + 2 * k;
        const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * k + 1))),
                                              _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * k))));
        const __m256i group_scale = _mm256_shuffle_epi8(scales16, pick);
        for (int t = 0; t < G; ++t) {
          const __m256i pairs = _mm256_maddubs_epi16(levels.q[k], load256(y_b[t]->qs + 16 * g));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pairs, group_scale));
        }
      }
    }
    const __m256i scales_all = _mm256_cvtepi8_epi16(load128(blk.scales));
    const float d = half_to_float(blk.d);
    for (int t = 0; t < G; ++t) {
      const __m256i offset = _mm256_madd_epi16(scales_all, load256(y_b[t]->bsums));
      const __m256i total = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(offset, 5));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y_b[t]->d), _mm256_cvtepi32_ps(total), acc[t]);
    }
  }
  for (int t = 0; t < G; ++t) y[t * y_stride] = hsum(acc[t]) * scale;
}

// Token groups of up to 4 outside, rows inside: the group's activations stay in L1/L2 across the
// rows. Row<G>::run computes G tokens against one weight row.
template <typename Block, template <int> class Row>
void tile(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
          int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  const int64_t n_blocks = n / QK_K;
  for (int64_t t = 0; t < n_tokens; t += 4) {
    const int64_t g = n_tokens - t < 4 ? n_tokens - t : 4;
    const uint8_t* a_t = a + static_cast<size_t>(t) * a_row;
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* w_r = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_row);
      float* y_tr = y + t * y_stride + r;
      switch (g) {
        case 4: Row<4>::run(n_blocks, w_r, a_t, a_row, scale, y_tr, y_stride); break;
        case 3: Row<3>::run(n_blocks, w_r, a_t, a_row, scale, y_tr, y_stride); break;
        case 2: Row<2>::run(n_blocks, w_r, a_t, a_row, scale, y_tr, y_stride); break;
        default: Row<1>::run(n_blocks, w_r, a_t, a_row, scale, y_tr, y_stride); break;
      }
    }
  }
}

template <int G>
struct Q4_KRow {
  static void run(int64_t n_blocks, const block_q4_K* x, const uint8_t* a, size_t a_row, float scale, float* y,
                  int64_t y_stride) {
    row_tokens_q4_K<G>(n_blocks, x, a, a_row, scale, y, y_stride);
  }
};

template <int G>
struct Q6_KRow {
  static void run(int64_t n_blocks, const block_q6_K* x, const uint8_t* a, size_t a_row, float scale, float* y,
                  int64_t y_stride) {
    row_tokens_q6_K<G>(n_blocks, x, a, a_row, scale, y, y_stride);
  }
};

}  // namespace

void tile_q6_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<block_q6_K, Q6_KRow>(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

void tile_q4_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<block_q4_K, Q4_KRow>(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

}  // namespace okapi::kernels::avx2
