#include "kv/exact_kernels.hpp"

#include <limits>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "kv/avx2/exact_kernels_avx2.hpp"

namespace okapi::kv {

float encode_int16(const float* x, std::int64_t n, std::int16_t* out, const char* what, ExactKernel kernel) {
  const bool avx2 = use_avx2_kernel(kernel);
  float max_abs = 0.0f;
  bool finite = true;
  if (avx2) {
    finite = avx2::max_abs_finite(x, n, &max_abs);
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      const float a = x[i] < 0.0f ? -x[i] : x[i];
      // NaN fails every comparison, so a <= max is false for NaN and infinity alike.
      finite &= a <= std::numeric_limits<float>::max();
      max_abs = a > max_abs ? a : max_abs;
    }
  }
  if (!finite) {
    for (std::int64_t i = 0; i < n; ++i)
      if (!(x[i] <= std::numeric_limits<float>::max() && x[i] >= -std::numeric_limits<float>::max()))
        throw_error("exact KV store: {} element {} is {} (not finite); exact mode needs finite values", what, i, x[i]);
  }
  if (max_abs == 0.0f) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = 0;
    return 1.0f;
  }
  float scale = max_abs / static_cast<float>(kExactIntMax);
  if (scale == 0.0f) scale = std::numeric_limits<float>::denorm_min();
  if (avx2) {
    avx2::quantize_int16(x, n, scale, out);
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<std::int16_t>(round_half_away_clamped(x[i] / scale));
  }
  return scale;
}

bool use_avx2_kernel(ExactKernel kernel) {
  if (kernel == ExactKernel::scalar) return false;
  if (!cpu_features().use_avx2())
    throw_error("exact KV store: AVX2 kernels requested but this CPU (or OKAPI_FORCE_SCALAR) disallows them");
  return true;
}

void dots_int16_scalar(const std::int16_t* q, const std::int16_t* rows, std::int64_t stride, std::int64_t count,
                       std::int64_t n, std::int64_t* out) {
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int16_t* row = rows + j * stride;
    std::int64_t sum = 0;
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<std::int64_t>(q[i]) * row[i];
    out[j] = sum;
  }
}

void weighted_sum_int16_scalar(const std::int16_t* p, const std::int16_t* rows, std::int64_t stride, std::int64_t count,
                               std::int64_t n, std::int64_t* acc) {
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int64_t weight = p[j];
    const std::int16_t* row = rows + j * stride;
    for (std::int64_t d = 0; d < n; ++d) acc[d] += weight * row[d];
  }
}

}  // namespace okapi::kv
