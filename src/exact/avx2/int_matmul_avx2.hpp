// AVX2 int16 dot products (exact/int_matmul.hpp). Call only when cpu_features().use_avx2().
#pragma once
#include <cstdint>

namespace okapi::exact::avx2 {

// Largest |x[i]| into *max_abs; false when an element is NaN or infinite.
bool max_abs_finite(const float* x, std::int64_t n, float* max_abs);
// out[i] = the scalar encoding of x[i] with `inverse` (exact/int_matmul.cpp) for i < the returned
// count (a multiple of 8 <= n); the same IEEE operations per lane, so the same integers.
std::int64_t quantize_row(const float* x, std::int64_t n, double inverse, std::int16_t* out);

void int16_dot_rows(const std::int16_t* w, const std::int16_t* x, std::int64_t x_stride, std::int64_t n_tokens,
                    std::int64_t n, std::int64_t* out);
void int16_matmul_rows(const std::int16_t* w, std::int64_t n_rows, const std::int16_t* x, std::int64_t n_tokens,
                       std::int64_t n, std::int64_t* out);

}  // namespace okapi::exact::avx2
