// Q4_K: 8 sub-blocks of 32 with 6-bit scale and min; 4-bit levels. Element e of a super-block:
// sub-block j = e / 32, level in qs[(j / 2) * 32 + e % 32], low nibble for even j.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include "kernels/scalar/kquant_k4_scales.hpp"
#include "kernels/scalar/kquant_rows.hpp"

namespace okapi::quant::kquant {
namespace {

int level_q4(const block_q4_K& b, int e) {
  const int j = e / 32;
  return (b.qs[(j / 2) * 32 + e % 32] >> (4 * (j % 2))) & 0xF;
}

void pack_levels_q4(const uint8_t* L, block_q4_K& y) {
  for (int j = 0; j < QK_K; j += 64) {
    for (int l = 0; l < 32; ++l) y.qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_block_q4(const float* x, block_q4_K& y) {
  constexpr ScaleSearch kSearch{-1.0f, 0.1f, 20, false};
  uint8_t L[QK_K];
  store_k4_scales(quantize_k4_super_block(x, 15, kSearch, L), y);
  pack_levels_q4(L, y);
}

void quantize_block_q4_weighted(const float* x, const float* qw, block_q4_K& y) {
  uint8_t L[QK_K];
  store_k4_scales(quantize_k4_super_block_weighted(x, qw, 15, false, L), y);
  pack_levels_q4(L, y);
}

}  // namespace

void quantize_q4_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_super_blocks_weighted<block_q4_K>(src, dst, n, importance, DType::Q4_K, quantize_block_q4_weighted);
}

void dequantize_q4_K(const void* src, float* dst, int64_t n) {
  dequantize_k4<block_q4_K>(src, dst, n, DType::Q4_K, level_q4);
}

void quantize_q4_K(const float* src, void* dst, int64_t n) {
  quantize_super_blocks<block_q4_K>(src, dst, n, DType::Q4_K, quantize_block_q4);
}

float vec_dot_q4_K(int64_t n, const void* w, const void* a) {
  return vec_dot_k4<block_q4_K>(n, w, a, DType::Q4_K, level_q4);
}

}  // namespace okapi::quant::kquant
