// Exact integer matmul for exact mode (seed 000): int16 weights and activations with one scale
// per row, products summed exactly in int64, rescaled once by the caller.
//
// Encoding of a row x[0, n): s = max|x| / 32767 in double (s = 1 for an all-zero row), x_int =
// round-half-away(x * (32767 / max|x|)) in double (a multiplication, not x / s: the same integer
// up to one rounding of the quotient, and several times faster), clamped to [-32767, 32767]
// (15 bits + sign: 16-bit precision; -32768 is never used, so a pair of products fits int32, see
// below). The row is zero-padded to a multiple of 16. Relative error of one element: |x - s x_int| <= s / 2 = max|x| / 65534.
//
// Overflow analysis (docs/exact-mode.md): one product |w x| <= 32767^2 = 1073676289 < 2^30, so a
// row of n products sums to |.| <= n 32767^2 < 2^63 for n < 2^33; the scalar kernel adds products
// into int64 directly. The AVX2 kernel uses _mm256_madd_epi16: each int32 lane gets a pair sum
// m = w0 x0 + w1 x1, |m| <= 2 * 32767^2 = 2147352578 < 2^31 - 1 (no overflow). m is split exactly as
// m = 65536 hi + lo, hi = m >> 16 in [-2^15, 2^15), lo = m & 0xffff in [0, 2^16); per int32 lane the
// kernel sums hi and m itself (wrapping mod 2^32), and recovers sum lo = sum m - 65536 sum hi
// (mod 2^32), exact because 0 <= sum lo < 2^32. After K pairs per lane the 8 lanes together hold
// |sum hi| <= 8 K 2^15 and sum lo <= 8 K (2^16 - 1), both <= 2^31 - 1 for K <= 4096, so every 4096
// pairs per lane (65536 elements of a row) the lanes are summed in int32 and flushed into int64 as
// 65536 sum_hi + sum_lo. The int64 result is then the same integer as the scalar sum.
#pragma once
#include <cstdint>
#include <string_view>

namespace okapi::exact {

inline constexpr std::int32_t kInt16EncodeMax = 32767;
inline constexpr std::int64_t kInt16RowAlign = 16;  // rows are zero-padded to a multiple of this

// n rounded up to a multiple of kInt16RowAlign.
std::int64_t padded_row_length(std::int64_t n);


enum class IntKernel { automatic, scalar, avx2 };

// Encodes x[0, n) into out[0, padded_row_length(n)) (zero tail) and returns the scale s; the AVX2
// path performs the scalar path's IEEE operations per lane (same integers). Throws okapi::Error
// naming `what` when an element is NaN or infinite.
double encode_row_int16(const float* x, std::int64_t n, std::int16_t* out, std::string_view what,
                        IntKernel kernel = IntKernel::automatic);

// True when `kernel` resolves to the AVX2 code here; throws okapi::Error when avx2 is asked for and
// the CPU (or OKAPI_FORCE_SCALAR) does not allow it.
bool int_kernel_uses_avx2(IntKernel kernel);

// out[t] = sum_i w[i] * x[t * x_stride + i] exactly, for t < n_tokens; n a multiple of 16, all
// values in [-32767, 32767].
void int16_dot_rows(const std::int16_t* w, const std::int16_t* x, std::int64_t x_stride, std::int64_t n_tokens,
                    std::int64_t n, std::int64_t* out, IntKernel kernel = IntKernel::automatic);

// The scalar reference of int16_dot_rows.
void int16_dot_rows_scalar(const std::int16_t* w, const std::int16_t* x, std::int64_t x_stride,
                           std::int64_t n_tokens, std::int64_t n, std::int64_t* out);

// A block of weight rows against all tokens: out[r * n_tokens + t] = w[r] . x[t] exactly, w with
// n_rows rows and x with n_tokens rows, both of stride n (a multiple of 16).
using Int16MatmulRowsFn = void (*)(const std::int16_t* w, std::int64_t n_rows, const std::int16_t* x,
                                   std::int64_t n_tokens, std::int64_t n, std::int64_t* out);
// The kernel `kernel` resolves to (throws as int_kernel_uses_avx2); callers in a hot loop keep it.
Int16MatmulRowsFn int16_matmul_rows_kernel(IntKernel kernel);

}  // namespace okapi::exact
