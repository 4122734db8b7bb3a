// Multi-token tiles for F32 and F16 weights against float activations (for F16 weights, the
// activations already rounded to fp16, as ggml's F16 x F16 dot sees them): each 8-weight vector
// is loaded (and converted) once and used for up to 4 tokens. Per (row, token) the operations and
// their order do not depend on how many tokens share the pass. Only after cpu_features().use_avx2().
#pragma once
#include <cstdint>

namespace okapi::kernels::avx2 {

// y[t * y_stride + r] = scale * dot(weight row r, x row t), r < n_rows, t < n_tokens; weight rows
// are w_row elements apart, x rows x_row floats apart.
using FloatTileFn = void (*)(int64_t n, const void* w, int64_t w_row, int64_t n_rows, const float* x, int64_t x_row,
                             int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_f32(int64_t n, const void* w, int64_t w_row, int64_t n_rows, const float* x, int64_t x_row,
              int64_t n_tokens, float scale, float* y, int64_t y_stride);
void tile_f16(int64_t n, const void* w, int64_t w_row, int64_t n_rows, const float* x, int64_t x_row,
              int64_t n_tokens, float scale, float* y, int64_t y_stride);

}  // namespace okapi::kernels::avx2
