// Q4_0 / Q8_0 weights x Q8_0 activations, 1-4 tokens per pass over a weight row. Per token the
// arithmetic is ggml's: the block's integer dot (exact), times d_w * d_a in float, accumulated
// into two 8-lane float sums (even and odd blocks), which are added and reduced at the end.
#include "kernels/avx2/gemm_q8_0.hpp"

#include <immintrin.h>

#include "kernels/blocks.hpp"

namespace okapi::kernels::avx2 {
namespace {

using quant::block_q4_0;
using quant::block_q8_0;

float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct Q4_0Weights {
  using Block = block_q4_0;
  // The 32 weights of a block as signed bytes in element order (low nibbles, then high), minus 8.
  static __m256i unpack(const Block& b) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask), _mm_and_si128(bytes, mask));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  }
};

struct Q8_0Weights {
  using Block = block_q8_0;
  static __m256i unpack(const Block& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
};

// G tokens (1..4) against one weight row. Activations contain no -128 (our Q8_0 quantizer's
// range is [-127, 127]), so maddubs(|w|, sign(a, w)) is the exact signed product.
template <typename W, int G>
void row_tokens(int64_t n_blocks, const typename W::Block* w, const uint8_t* a, size_t a_row, const float* a_scales,
                float scale, float* y, int64_t y_stride) {
  __m256 acc[G][2];
  for (int j = 0; j < G; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  // One block into accumulator `parity` of every token (parity is a constant after inlining,
  // so the accumulators stay in registers).
  auto block = [&](int64_t b, int parity) {
    const __m256i q = W::unpack(w[b]);
    const __m256i abs_q = _mm256_sign_epi8(q, q);
    const __m256 d_w = _mm256_set1_ps(_cvtsh_ss(w[b].d));
    for (int j = 0; j < G; ++j) {
      const auto* act = reinterpret_cast<const block_q8_0*>(a + static_cast<size_t>(j) * a_row) + b;
      const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act->qs));
      const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(abs_q, _mm256_sign_epi8(av, q)), ones);
      const __m256 d = _mm256_mul_ps(d_w, _mm256_broadcast_ss(a_scales + j * n_blocks + b));
      acc[j][parity] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc[j][parity]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    block(b, 0);
    block(b + 1, 1);
  }
  if (b < n_blocks) block(b, 0);
  for (int j = 0; j < G; ++j) y[j * y_stride] = hsum8(_mm256_add_ps(acc[j][0], acc[j][1])) * scale;
}

template <typename W>
void tile(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
          const float* a_scales, int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  const int64_t n_blocks = n / 32;
  // Token groups outside, rows inside: the group's activations stay in L1 across the rows.
  for (int64_t t = 0; t < n_tokens; t += 4) {
    const int64_t g = n_tokens - t < 4 ? n_tokens - t : 4;
    const uint8_t* a_t = a + static_cast<size_t>(t) * a_row;
    const float* s_t = a_scales + t * n_blocks;
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* w_r = reinterpret_cast<const typename W::Block*>(w + static_cast<size_t>(r) * w_row);
      float* y_tr = y + t * y_stride + r;
      switch (g) {
        case 4: row_tokens<W, 4>(n_blocks, w_r, a_t, a_row, s_t, scale, y_tr, y_stride); break;
        case 3: row_tokens<W, 3>(n_blocks, w_r, a_t, a_row, s_t, scale, y_tr, y_stride); break;
        case 2: row_tokens<W, 2>(n_blocks, w_r, a_t, a_row, s_t, scale, y_tr, y_stride); break;
        default: row_tokens<W, 1>(n_blocks, w_r, a_t, a_row, s_t, scale, y_tr, y_stride); break;
      }
    }
  }
}

}  // namespace

void tile_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    const float* a_scales, int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<Q4_0Weights>(n, w, w_row, n_rows, a, a_row, a_scales, n_tokens, scale, y, y_stride);
}

void tile_q8_0_q8_0(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    const float* a_scales, int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<Q8_0Weights>(n, w, w_row, n_rows, a, a_row, a_scales, n_tokens, scale, y, y_stride);
}

}  // namespace okapi::kernels::avx2
