// AVX2 versions of the exact KV kernels (kv/exact_kernels.hpp), same contracts and the same
// integers as the scalar references. Call only when cpu_features().use_avx2().
#pragma once
#include <cstdint>

namespace okapi::kv::avx2 {

// *max_abs = max |x[i]|; returns false when some x[i] is NaN or infinite.
bool max_abs_finite(const float* x, std::int64_t n, float* max_abs);
// out[i] = round_half_away_clamped(x[i] / scale) (kv/exact_kernels.hpp).
void quantize_int16(const float* x, std::int64_t n, float scale, std::int16_t* out);

void dots_int16(const std::int16_t* q, const std::int16_t* rows, std::int64_t stride, std::int64_t count,
                std::int64_t n, std::int64_t* out);

void weighted_sum_int16(const std::int16_t* p, const std::int16_t* rows, std::int64_t stride, std::int64_t count,
                        std::int64_t n, std::int64_t* acc);

}  // namespace okapi::kv::avx2
