#include "train/primitives.hpp"

#include <cmath>

#include "core/cpu.hpp"
#include "kernels/avx2/vector_ops.hpp"
#include "kernels/kernels.hpp"

namespace okapi::train::detail {

double sum_squares(const float* x, int64_t n) {
  if (cpu_features().use_avx2()) return kernels::avx2::sum_squares(x, n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

double sum_squares(const double* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

double exp_shifted(float* x, int64_t n, float shift) {
  if (cpu_features().use_avx2()) return kernels::avx2::exp_minus_max(x, n, shift);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    s += static_cast<double>(x[i]);
  }
  return s;
}

double exp_shifted(double* x, int64_t n, double shift) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    s += x[i];
  }
  return s;
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) { kernels::swiglu(gate, up, n, out); }

void swiglu(const double* gate, const double* up, int64_t n, double* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
}

}  // namespace okapi::train::detail
