// Scalar reference versions of the element-wise kernels, written to round like ggml's CPU
// backend: sums of squares and softmax denominators accumulate in double (ggml_float).
#include <algorithm>
#include <cmath>

#include "core/half.hpp"
#include "kernels/gelu_table.hpp"
#include "kernels/kernels.hpp"

namespace okapi::kernels::ref {

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  // ggml_compute_forward_rms_norm_f32: float squares summed in double, then float mean/scale;
  // llama.cpp multiplies by the norm weight in a separate op (x * scale) * w.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = weight ? (x[i] * scale) * weight[i] : x[i] * scale;
}

float softmax(float* x, int64_t n, double* sum) {
  const float max = *std::max_element(x, x + n);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    total += static_cast<double>(x[i]);
  }
  const auto inv = static_cast<float>(1.0 / total);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  *sum = total;
  return max;
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  double sum = 0.0;
  (void)softmax(x, n, &sum);
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void geglu_tanh(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = detail::gelu_tanh_table(gate[i]) * up[i];
}

void relu2_glu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = std::max(gate[i], 0.0f);
    out[i] = r * r * up[i];
  }
}

float dot_f32(const float* a, const float* b, int64_t n) {
  double sum = 0.0;  // as ggml_vec_dot_f32's scalar path
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i] * b[i]);
  return static_cast<float>(sum);
}

void axpy(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

}  // namespace okapi::kernels::ref
