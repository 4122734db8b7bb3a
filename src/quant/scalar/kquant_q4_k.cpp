// Q4_K: 8 sub-blocks of 32 with 6-bit scale and min; 4-bit levels. Element e of a super-block:
// sub-block j = e / 32, level in qs[(j / 2) * 32 + e % 32], low nibble for even j.
#include "quant/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include "core/half.hpp"
#include "quant/scalar/kquant_k4_scales.hpp"
#include "quant/scalar/kquant_rows.hpp"

namespace okapi::quant::kquant {
namespace {

int level_q4(const block_q4_K& b, int e) {
  const int j = e / 32;
  return (b.qs[(j / 2) * 32 + e % 32] >> (4 * (j % 2))) & 0xF;
}

void quantize_block_q4(const float* x, block_q4_K& y) {
  constexpr ScaleSearch kSearch{-1.0f, 0.1f, 20, false};
  uint8_t L[QK_K];
  const K4Scales s = quantize_k4_super_block(x, 15, kSearch, L);
  y.d = s.d;
  y.dmin = s.dmin;
  for (int k = 0; k < K_SCALE_SIZE; ++k) y.scales[k] = s.packed[k];
  for (int j = 0; j < QK_K; j += 64) {
    for (int l = 0; l < 32; ++l) y.qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

}  // namespace

void dequantize_q4_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q4_K*>(src);
  const int64_t nb = super_blocks(n, DType::Q4_K);
  for (int64_t i = 0; i < nb; ++i) {
    const block_q4_K& b = blocks[i];
    const float d = fp16_to_fp32(b.d);
    const float dmin = fp16_to_fp32(b.dmin);
    for (int j = 0; j < QK_K / 32; ++j) {
      const ScaleMin6 sm = unpack_scale_min_k4(j, b.scales);
      const float dl = d * static_cast<float>(sm.scale);
      const float ml = dmin * static_cast<float>(sm.min);
      for (int e = 32 * j; e < 32 * j + 32; ++e) *dst++ = dl * static_cast<float>(level_q4(b, e)) - ml;
    }
  }
}

void quantize_q4_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q4_K*>(dst);
  const int64_t nb = super_blocks(n, DType::Q4_K);
  for (int64_t i = 0; i < nb; ++i) quantize_block_q4(src + i * QK_K, blocks[i]);
}

float vec_dot_q4_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q4_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  const int64_t nb = super_blocks(n, DType::Q4_K);
  LaneSums sums;
  float min_part = 0.0f;
  int8_t levels[QK_K];
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < QK_K; ++e) levels[e] = static_cast<int8_t>(level_q4(x[i], e));
    int32_t min_sum = 0;  // mins pair with Q8_K's 16-element group sums
    for (int j = 0; j < QK_K / 32; ++j) {
      const ScaleMin6 sm = unpack_scale_min_k4(j, x[i].scales);
      min_sum += (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]) * sm.min;
      sums.add_group(sm.scale, y[i].qs + 32 * j, levels + 32 * j, 32);
    }
    sums.finish_block(fp16_to_fp32(x[i].d) * y[i].d);
    min_part -= fp16_to_fp32(x[i].dmin) * y[i].d * static_cast<float>(min_sum);
  }
  return sums.total(min_part);
}

}  // namespace okapi::quant::kquant
