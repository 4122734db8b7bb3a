// Q4_1, Q5_0 and Q5_1 rows (32-element blocks; layouts in legacy_unpack.hpp). The dot products
// are dot_legacy_tokens with one token, the code the multi-token GEMM runs too.
// Q4_1 / Q5_1 keep the reference dequantize: their q * d + m cannot be made bit-identical for
// every NaN scale and min (which NaN an add returns depends on the operand order the compiler
// picked for the reference), and matmul does not dequantize them.
#include "kernels/avx2/legacy_unpack.hpp"
#include "kernels/avx2/row_kernels.hpp"
#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx2 {
namespace {

template <typename W>
float vec_dot_one_token(int64_t n, const void* w, const void* a) {
  float out;
  dot_legacy_tokens<W, 1>(n / 32, static_cast<const typename W::Block*>(w), static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

}  // namespace

// (q - 16) * d: the level difference is exact in int8, one rounded product.
void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q5_0*>(src);
  for (int64_t b = 0; b < n / QK5_0; ++b) {
    const __m256 d = _mm256_set1_ps(half_to_float(blocks[b].d));
    const __m256i q = _mm256_sub_epi8(Q5_0Weights::levels(blocks[b]), _mm256_set1_epi8(16));
    store_scaled_i8x32(q, d, dst + b * QK5_0);
  }
}

float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a) { return vec_dot_one_token<Q4_1Weights>(n, w, a); }
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a) { return vec_dot_one_token<Q5_0Weights>(n, w, a); }
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a) { return vec_dot_one_token<Q5_1Weights>(n, w, a); }

}  // namespace okapi::quant::avx2
