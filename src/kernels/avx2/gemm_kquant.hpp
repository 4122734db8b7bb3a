// Multi-token tiles for Q4_K / Q6_K weights x Q8_K activations: each 256-element super-block of a weight
// row is unpacked once (nibbles, scales) and multiplied with up to 4 tokens. Per (row, token) the
// operations and their order are those of the format's vec_dot (kernels/avx2/kquant_kernels.cpp), so a
// batched row equals the single-token result up to the compiler's FMA contraction. Callable only
// after cpu_features().use_avx2().
#pragma once
#include <cstddef>
#include <cstdint>

namespace okapi::kernels::avx2 {

// y[t * y_stride + r] = scale * dot(weight row r, activation row t), r < n_rows, t < n_tokens.
// Weight rows are w_row bytes apart, Q8_K activation rows a_row bytes apart; n % 256 == 0.
using Q8_KTileFn = void (*)(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                            int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_q4_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_q6_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride);

}  // namespace okapi::kernels::avx2
