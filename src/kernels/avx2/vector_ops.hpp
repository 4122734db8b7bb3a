// AVX2+FMA pieces of the element-wise kernels; dispatch.cpp combines them with the scalar parts
// (the float/double arithmetic ggml does outside its SIMD loops). Callable only after
// cpu_features().use_avx2(). Declarations only: no inline code shared with non-AVX files.
#pragma once
#include <cstdint>

namespace okapi::kernels::avx2 {

double sum_squares(const float* x, int64_t n);  // sum of float squares, accumulated in double
// y[i] = (x[i] * scale) * weight[i], or x[i] * scale when weight is null.
void scale_rows(const float* x, float scale, const float* weight, int64_t n, float* y);
float max(const float* x, int64_t n);
double exp_minus_max(float* x, int64_t n, float max);  // x[i] = exp(x[i] - max); returns the double sum
void scale_in_place(float* x, int64_t n, float scale);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void relu2_glu(const float* gate, const float* up, int64_t n, float* out);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, int64_t n, float* y);
void axpy_f16(float a, const uint16_t* x, int64_t n, float* y);  // F16C conversions

}  // namespace okapi::kernels::avx2
