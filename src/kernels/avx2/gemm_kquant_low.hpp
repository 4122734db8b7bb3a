// Multi-token tiles for Q2_K / Q3_K / Q5_K weights x Q8_K activations: each 256-element
// super-block of a weight row is unpacked once and multiplied with up to 4 tokens. Per
// (row, token) the code is the row kernel's (kernels/avx2/kquant_low_unpack.hpp), so a batched
// result equals the single-token vec_dot bit for bit. Callable only after
// cpu_features().use_avx2(). Same signature as Q8_KTileFn (gemm_kquant.hpp); n % 256 == 0.
#pragma once
#include <cstddef>
#include <cstdint>

namespace okapi::kernels::avx2 {

void tile_q2_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_q3_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_q5_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride);

}  // namespace okapi::kernels::avx2
