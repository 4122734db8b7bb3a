// The element-wise entry points: AVX2 when the tier in use has it (cpu_features().use_avx2(),
// which honours OKAPI_ISA / OKAPI_FORCE_SCALAR), the scalar reference otherwise. The scalar steps
// between the SIMD loops (mean, 1/sqrt, 1/sum) round exactly like the reference and ggml.
#include <cmath>

#include "core/cpu.hpp"
#include "kernels/avx2/vector_ops.hpp"
#include "kernels/kernels.hpp"

namespace okapi::kernels {
namespace {

bool use_avx2() {
  static const bool yes = cpu_features().use_avx2();
  return yes;
}

}  // namespace

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  if (!use_avx2()) return ref::rmsnorm(x, weight, n, eps, y);
  const double sum = avx2::sum_squares(x, n);
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  avx2::scale_rows(x, 1.0f / std::sqrt(mean + eps), weight, n, y);
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t position, const RopeConfig& config) {
  ref::rope(x, n_heads, head_dim, position, config);  // n_rot/2 cos/sin per token: not worth SIMD
}

void softmax(float* x, int64_t n) {
  if (!use_avx2() || n <= 0) return ref::softmax(x, n);
  const double sum = avx2::exp_minus_max(x, n, avx2::max(x, n));
  avx2::scale_in_place(x, n, static_cast<float>(1.0 / sum));
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  if (!use_avx2()) return ref::swiglu(gate, up, n, out);
  avx2::swiglu(gate, up, n, out);
}

void geglu_tanh(const float* gate, const float* up, int64_t n, float* out) {
  ref::geglu_tanh(gate, up, n, out);  // a table lookup per element, as ggml
}

void relu2_glu(const float* gate, const float* up, int64_t n, float* out) {
  if (!use_avx2()) return ref::relu2_glu(gate, up, n, out);
  avx2::relu2_glu(gate, up, n, out);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  return use_avx2() ? avx2::dot_f32(a, b, n) : ref::dot_f32(a, b, n);
}

void axpy(float a, const float* x, int64_t n, float* y) {
  if (!use_avx2()) return ref::axpy(a, x, n, y);
  avx2::axpy(a, x, n, y);
}

void axpy_f16(float a, const uint16_t* x, int64_t n, float* y) {
  if (!use_avx2()) return ref::axpy_f16(a, x, n, y);
  avx2::axpy_f16(a, x, n, y);
}

}  // namespace okapi::kernels
