// Multi-token tiles for weight formats that pair with Q8_0 activations (Q4_0, Q8_0): each weight
// block is unpacked once and multiplied with up to 4 tokens. Every (row, token) result is
// computed with the same operations in the same order whatever the number of tokens, so a
// batched row equals the single-token result bit for bit. Callable only after
// cpu_features().use_avx2().
#pragma once
#include <cstddef>
#include <cstdint>

namespace okapi::kernels::avx2 {

// y[t * y_stride + r] = scale * dot(weight row r, activation row t), r < n_rows, t < n_tokens.
// Weight rows are w_row bytes apart, Q8_0 activation rows a_row bytes apart; n % 32 == 0.
// a_scales: the activation blocks' fp16 d as floats, n / 32 per token, rows contiguous.
using Q8_0TileFn = void (*)(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                            const float* a_scales, int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    const float* a_scales, int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_q8_0_q8_0(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    const float* a_scales, int64_t n_tokens, float scale, float* y, int64_t y_stride);

}  // namespace okapi::kernels::avx2
