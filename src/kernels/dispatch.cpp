// The element-wise kernels per ISA tier (VectorKernels): AVX2 from the avx2 tier up, the scalar
// reference otherwise. The scalar steps between the SIMD loops (mean, 1/sqrt, 1/sum) round
// exactly like the reference and ggml.
#include <cmath>

#include "core/cpu.hpp"
#include "kernels/avx2/vector_ops.hpp"
#include "kernels/kernels.hpp"

namespace okapi::kernels {
namespace {

void rmsnorm_avx2(const float* x, const float* weight, int64_t n, float eps, float* y) {
  const double sum = avx2::sum_squares(x, n);
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  avx2::scale_rows(x, 1.0f / std::sqrt(mean + eps), weight, n, y);
}

void softmax_avx2(float* x, int64_t n) {
  if (n <= 0) return ref::softmax(x, n);
  const double sum = avx2::exp_minus_max(x, n, avx2::max(x, n));
  avx2::scale_in_place(x, n, static_cast<float>(1.0 / sum));
}

// geglu_tanh is a table lookup per element on every tier, as ggml.
constexpr VectorKernels kScalar{ref::rmsnorm,    static_cast<void (*)(float*, int64_t)>(ref::softmax),
                                ref::swiglu,     ref::geglu_tanh,
                                ref::relu2_glu,  ref::dot_f32,
                                ref::axpy,       ref::axpy_f16};
constexpr VectorKernels kAvx2{rmsnorm_avx2,     softmax_avx2,  avx2::swiglu, ref::geglu_tanh, avx2::relu2_glu,
                              avx2::dot_f32,    avx2::axpy,    avx2::axpy_f16};

}  // namespace

const VectorKernels& vector_kernels(Isa tier) { return tier >= Isa::avx2 ? kAvx2 : kScalar; }

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  vector_kernels(isa()).rmsnorm(x, weight, n, eps, y);
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t position, const RopeConfig& config) {
  ref::rope(x, n_heads, head_dim, position, config);  // n_rot/2 cos/sin per token: not worth SIMD
}

void softmax(float* x, int64_t n) { vector_kernels(isa()).softmax(x, n); }

void swiglu(const float* gate, const float* up, int64_t n, float* out) { vector_kernels(isa()).swiglu(gate, up, n, out); }

void geglu_tanh(const float* gate, const float* up, int64_t n, float* out) {
  vector_kernels(isa()).geglu_tanh(gate, up, n, out);
}

void relu2_glu(const float* gate, const float* up, int64_t n, float* out) {
  vector_kernels(isa()).relu2_glu(gate, up, n, out);
}

float dot_f32(const float* a, const float* b, int64_t n) { return vector_kernels(isa()).dot_f32(a, b, n); }

void axpy(float a, const float* x, int64_t n, float* y) { vector_kernels(isa()).axpy(a, x, n, y); }

void axpy_f16(float a, const uint16_t* x, int64_t n, float* y) { vector_kernels(isa()).axpy_f16(a, x, n, y); }

}  // namespace okapi::kernels
