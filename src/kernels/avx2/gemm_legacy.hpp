// Multi-token tiles for Q4_1 / Q5_1 weights x Q8_1 activations and Q5_0 weights x Q8_0
// activations: each weight block is unpacked once and multiplied with up to 4 tokens. Per
// (row, token) the code is the row kernel's (kernels/avx2/legacy_unpack.hpp), so a batched result
// equals the single-token vec_dot bit for bit. Callable only after cpu_features().use_avx2().
#pragma once
#include <cstddef>
#include <cstdint>

namespace okapi::kernels::avx2 {

// y[t * y_stride + r] = scale * dot(weight row r, activation row t), r < n_rows, t < n_tokens.
// Weight rows are w_row bytes apart, activation rows (the format's vec_dot_type) a_row bytes
// apart; n % 32 == 0. (The same signature as Q8_KTileFn in gemm_kquant.hpp.)
void tile_q4_1_q8_1(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_q5_0_q8_0(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_q5_1_q8_1(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride);

}  // namespace okapi::kernels::avx2
