#include "exact/int_matmul.hpp"

#include <algorithm>
#include <cmath>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "exact/avx2/int_matmul_avx2.hpp"

namespace okapi::exact {

std::int64_t padded_row_length(std::int64_t n) { return (n + kInt16RowAlign - 1) / kInt16RowAlign * kInt16RowAlign; }

double encode_row_int16(const float* x, std::int64_t n, std::int16_t* out, std::string_view what,
                        IntKernel kernel) {
  const bool simd = int_kernel_uses_avx2(kernel);
  float max_abs = 0.0f;
  bool finite = true;
  if (simd) {
    finite = avx2::max_abs_finite(x, n, &max_abs);
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      const float a = x[i] < 0 ? -x[i] : x[i];
      finite = finite && std::isfinite(a);
      max_abs = std::max(max_abs, a);
    }
  }
  if (!finite)
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i])) throw_error("exact mode: {} holds a non-finite value ({}) at index {}", what, x[i], i);
  const double max = max_abs;
  const double scale = max > 0.0 ? max / kInt16EncodeMax : 1.0;
  const double inverse = max > 0.0 ? kInt16EncodeMax / max : 1.0;
  // The AVX2 lanes do exactly these operations; the scalar loop finishes the tail (or all of it).
  for (std::int64_t i = simd ? avx2::quantize_row(x, n, inverse, out) : 0; i < n; ++i) {
    const double y = static_cast<double>(x[i]) * inverse;  // |y| <= 32767 up to one rounding
    // Round half away from zero: truncation of |y| + 0.5 (exact for |y| < 2^52), then clamp.
    const double a = y < 0 ? -y : y;
    const auto r = std::min<std::int64_t>(static_cast<std::int64_t>(a + 0.5), kInt16EncodeMax);
    out[i] = static_cast<std::int16_t>(y < 0 ? -r : r);
  }
  std::fill(out + n, out + padded_row_length(n), std::int16_t{0});
  return scale;
}

bool int_kernel_uses_avx2(IntKernel kernel) {
  const bool available = cpu_features().use_avx2();
  if (kernel == IntKernel::avx2 && !available)
    throw_error("exact int16 matmul: the AVX2 kernel was asked for but this CPU (or OKAPI_FORCE_SCALAR) does not allow it");
  return kernel != IntKernel::scalar && available;
}

void int16_dot_rows_scalar(const std::int16_t* w, const std::int16_t* x, std::int64_t x_stride,
                           std::int64_t n_tokens, std::int64_t n, std::int64_t* out) {
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    const std::int16_t* xt = x + t * x_stride;
    std::int64_t sum = 0;  // |sum| <= n 32767^2 < 2^63 for n < 2^33
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<std::int32_t>(w[i]) * static_cast<std::int32_t>(xt[i]);
    out[t] = sum;
  }
}

void int16_dot_rows(const std::int16_t* w, const std::int16_t* x, std::int64_t x_stride, std::int64_t n_tokens,
                    std::int64_t n, std::int64_t* out, IntKernel kernel) {
  if (n % kInt16RowAlign != 0) throw_error("int16_dot_rows: n = {} is not a multiple of {}", n, kInt16RowAlign);
  if (int_kernel_uses_avx2(kernel)) {
    avx2::int16_dot_rows(w, x, x_stride, n_tokens, n, out);
  } else {
    int16_dot_rows_scalar(w, x, x_stride, n_tokens, n, out);
  }
}

namespace {
void int16_matmul_rows_scalar(const std::int16_t* w, std::int64_t n_rows, const std::int16_t* x,
                              std::int64_t n_tokens, std::int64_t n, std::int64_t* out) {
  for (std::int64_t r = 0; r < n_rows; ++r) int16_dot_rows_scalar(w + r * n, x, n, n_tokens, n, out + r * n_tokens);
}
}  // namespace

Int16MatmulRowsFn int16_matmul_rows_kernel(IntKernel kernel) {
  return int_kernel_uses_avx2(kernel) ? &avx2::int16_matmul_rows : &int16_matmul_rows_scalar;
}

}  // namespace okapi::exact
