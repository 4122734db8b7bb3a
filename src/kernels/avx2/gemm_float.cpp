// F32 / F16 weight rows x float activation rows in register blocks of up to 3 rows x 4 tokens.
// Per (row, token): one 8-lane FMA accumulator over 8-element steps, reduced, then the leftover
// elements added one by one; the same whatever the block shape.
#include "kernels/avx2/gemm_float.hpp"

#include <immintrin.h>

namespace okapi::kernels::avx2 {
namespace {

float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct F32Weights {
  using Element = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static float scalar(const float* p) { return *p; }
};

struct F16Weights {
  using Element = uint16_t;
  static __m256 load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float scalar(const uint16_t* p) { return _cvtsh_ss(*p); }
};

// R weight rows x G tokens, one 8-lane accumulator per (row, token): R + G loads feed R * G FMAs.
template <typename W, int R, int G>
void block(int64_t n, const typename W::Element* w, int64_t w_row, const float* x, int64_t x_row, float scale, float* y,
           int64_t y_stride) {
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < G; ++j) acc[r][j] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = W::load(w + r * w_row + i);
    for (int j = 0; j < G; ++j) {
      const __m256 xv = _mm256_loadu_ps(x + j * x_row + i);
      for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < G; ++j) {
      float sum = hsum8(acc[r][j]);
      for (int64_t k = i; k < n; ++k) sum += W::scalar(w + r * w_row + k) * x[j * x_row + k];
      y[j * y_stride + r] = sum * scale;
    }
  }
}

template <typename W, int R>
void rows_block(int64_t g, int64_t n, const typename W::Element* w, int64_t w_row, const float* x, int64_t x_row,
                float scale, float* y, int64_t y_stride) {
  switch (g) {
    case 4: block<W, R, 4>(n, w, w_row, x, x_row, scale, y, y_stride); break;
    case 3: block<W, R, 3>(n, w, w_row, x, x_row, scale, y, y_stride); break;
    case 2: block<W, R, 2>(n, w, w_row, x, x_row, scale, y, y_stride); break;
    default: block<W, R, 1>(n, w, w_row, x, x_row, scale, y, y_stride); break;
  }
}

template <typename W>
void tile(int64_t n, const void* w, int64_t w_row, int64_t n_rows, const float* x, int64_t x_row, int64_t n_tokens,
          float scale, float* y, int64_t y_stride) {
  const auto* weights = static_cast<const typename W::Element*>(w);
  // Token groups of 4 outside, row triples inside (12 accumulators + 3 weights + 1 x = 16 ymm).
  for (int64_t t = 0; t < n_tokens; t += 4) {
    const int64_t g = n_tokens - t < 4 ? n_tokens - t : 4;
    const float* x_t = x + t * x_row;
    int64_t r = 0;
    for (; r + 3 <= n_rows; r += 3) rows_block<W, 3>(g, n, weights + r * w_row, w_row, x_t, x_row, scale, y + t * y_stride + r, y_stride);
    if (n_rows - r == 2) rows_block<W, 2>(g, n, weights + r * w_row, w_row, x_t, x_row, scale, y + t * y_stride + r, y_stride);
    if (n_rows - r == 1) rows_block<W, 1>(g, n, weights + r * w_row, w_row, x_t, x_row, scale, y + t * y_stride + r, y_stride);
  }
}

}  // namespace

void tile_f32(int64_t n, const void* w, int64_t w_row, int64_t n_rows, const float* x, int64_t x_row,
              int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<F32Weights>(n, w, w_row, n_rows, x, x_row, n_tokens, scale, y, y_stride);
}

void tile_f16(int64_t n, const void* w, int64_t w_row, int64_t n_rows, const float* x, int64_t x_row,
              int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<F16Weights>(n, w, w_row, n_rows, x, x_row, n_tokens, scale, y, y_stride);
}

}  // namespace okapi::kernels::avx2
