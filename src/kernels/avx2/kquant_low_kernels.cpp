// Q2_K, Q3_K and Q5_K rows against Q8_K activations (layouts and arithmetic in
// kquant_low_unpack.hpp): dot_q*_K_tokens with one token, the code the multi-token GEMM runs too.
#include "kernels/avx2/kquant_low_unpack.hpp"
#include "kernels/avx2/row_kernels.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx2 {

float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* a) {
  float out;
  dot_q2_K_tokens<1>(n / QK_K, static_cast<const block_q2_K*>(w), static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* a) {
  float out;
  dot_q3_K_tokens<1>(n / QK_K, static_cast<const block_q3_K*>(w), static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a) {
  float out;
  dot_q5_K_tokens<1>(n / QK_K, static_cast<const block_q5_K*>(w), static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

}  // namespace okapi::quant::avx2
