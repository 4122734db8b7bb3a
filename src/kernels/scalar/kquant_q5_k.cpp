// Q5_K: Q4_K's layout plus a fifth bit per level. Element e of a super-block: sub-block j = e / 32,
// low 4 bits in qs[(j / 2) * 32 + e % 32] (low nibble for even j), bit 4 in qh[e % 32] bit j.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include <cstring>

#include "kernels/scalar/kquant_k4_scales.hpp"
#include "kernels/scalar/kquant_rows.hpp"

namespace okapi::quant::kquant {
namespace {

int level_q5(const block_q5_K& b, int e) {
  const int j = e / 32;
  const int low = (b.qs[(j / 2) * 32 + e % 32] >> (4 * (j % 2))) & 0xF;
  return low + (((b.qh[e % 32] >> j) & 1) << 4);
}

void pack_levels_q5(const uint8_t* L, block_q5_K& y) {
  std::memset(y.qh, 0, sizeof(y.qh));
  for (int e = 0; e < QK_K; ++e) {
    const int j = e / 32;
    if (L[e] > 15) y.qh[e % 32] = static_cast<uint8_t>(y.qh[e % 32] | (1 << j));
    const int low = L[e] & 0xF;
    uint8_t& q = y.qs[(j / 2) * 32 + e % 32];
    q = static_cast<uint8_t>(j % 2 == 0 ? low : (q | (low << 4)));
  }
}

void quantize_block_q5(const float* x, block_q5_K& y) {
  constexpr ScaleSearch kSearch{-0.5f, 0.1f, 15, false};
  uint8_t L[QK_K];
  store_k4_scales(quantize_k4_super_block(x, 31, kSearch, L), y);
  pack_levels_q5(L, y);
}

void quantize_block_q5_weighted(const float* x, const float* qw, block_q5_K& y) {
  uint8_t L[QK_K];
  store_k4_scales(quantize_k4_super_block_weighted(x, qw, 31, true, L), y);
  pack_levels_q5(L, y);
}

}  // namespace

void quantize_q5_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_super_blocks_weighted<block_q5_K>(src, dst, n, importance, DType::Q5_K, quantize_block_q5_weighted);
}

void dequantize_q5_K(const void* src, float* dst, int64_t n) {
  dequantize_k4<block_q5_K>(src, dst, n, DType::Q5_K, level_q5);
}

void quantize_q5_K(const float* src, void* dst, int64_t n) {
  quantize_super_blocks<block_q5_K>(src, dst, n, DType::Q5_K, quantize_block_q5);
}

float vec_dot_q5_K(int64_t n, const void* w, const void* a) {
  return vec_dot_k4<block_q5_K>(n, w, a, DType::Q5_K, level_q5);
}

}  // namespace okapi::quant::kquant
