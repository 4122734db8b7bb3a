// Integer kernels of the exact KV stores (kv/exact_store.hpp): the int16 encoding, the exact int64
// dot product of two int16 rows and the exact int64 weighted sum of int16 value rows. Every
// kernel has a scalar reference; the AVX2 versions (kv/avx2/) return the same integers, because
// integer sums are exact in any order.
#pragma once
#include <cstdint>
#include <memory>

#include "kv/exact_store.hpp"

namespace okapi::kv {

// Largest |x_int| of the encoding. Not -32768: with |a|, |b| <= 32767, a pair sum a0 b0 + a1 b1 is
// at most 2 * 32767^2 = 2147352578 < 2^31 - 1, so _mm256_madd_epi16 cannot overflow.
inline constexpr std::int32_t kExactIntMax = 32767;

// Round half away from zero of a float (not NaN), clamped to [-32767, 32767]; exact, no libm.
// Branch-free so the encoding loop vectorizes (every step is an exact IEEE operation, so SIMD
// and scalar code give the same integers). After the clamp |y| <= 32767 < 2^24: the truncation
// is exact and so is y - trunc(y) (same binade or below).
inline std::int32_t round_half_away_clamped(float y) {
  constexpr float kMax = static_cast<float>(kExactIntMax);
  y = y > kMax ? kMax : y;
  y = y < -kMax ? -kMax : y;
  const auto whole = static_cast<std::int32_t>(y);
  const float fraction = y - static_cast<float>(whole);
  return whole + static_cast<std::int32_t>(fraction >= 0.5f) - static_cast<std::int32_t>(fraction <= -0.5f);
}

enum class ExactKernel { scalar, avx2 };

// Encodes x[0, n) as x_int = round-half-away(x / s) with s = max|x| / 32767 (float division),
// s = 1 for an all-zero vector, and returns s. When max|x| is so small that s underflows to 0,
// s is the smallest denormal and x_int is clamped to [-32767, 32767] (the result stays
// deterministic). Throws okapi::Error naming `what` when an element is NaN or infinite.
// `kernel` picks the scalar reference or the AVX2 loop (the same bits: max, division,
// truncation and comparisons are exact IEEE operations in either).
float encode_int16(const float* x, std::int64_t n, std::int16_t* out, const char* what,
                   ExactKernel kernel = ExactKernel::scalar);

// True when `kernel` is the AVX2 code; throws when avx2 is asked for and the CPU (or
// OKAPI_ISA / OKAPI_FORCE_SCALAR) does not allow it.
bool use_avx2_kernel(ExactKernel kernel);

// out[j] = sum_i q[i] rows[j * stride + i] in int64 for j < count; n a multiple of 16 (rows are
// zero-padded to it).
void dots_int16_scalar(const std::int16_t* q, const std::int16_t* rows, std::int64_t stride, std::int64_t count,
                       std::int64_t n, std::int64_t* out);

// acc[d] += sum_j p[j] * rows[j * stride + d] for j < count, d < n; n a multiple of 16.
void weighted_sum_int16_scalar(const std::int16_t* p, const std::int16_t* rows, std::int64_t stride, std::int64_t count,
                               std::int64_t n, std::int64_t* acc);

// A store with an explicit kernel choice (tests compare scalar and AVX2 bit for bit).
std::unique_ptr<KvStore> make_exact_store(const KvShape& shape, ExactScores scores, ExactKernel kernel);

}  // namespace okapi::kv
