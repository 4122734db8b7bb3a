// Q4_K and Q5_K share their scale structure: 8 sub-blocks of 32, each with a 6-bit scale and a
// 6-bit min (12 packed bytes), times the fp16 super-block d and dmin. They differ only in how a
// level is stored, so their rows are written once here, over a `level(block, e)` reader.
#pragma once
#include "kernels/scalar/kquant_strict_fp.hpp"  // the templates below must not contract a*b+c either

#include <cstdint>

#include "core/half.hpp"
#include "kernels/scalar/kquant_rows.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::kquant {

struct K4Scales {
  uint16_t d = 0;
  uint16_t dmin = 0;
  uint8_t packed[12] = {};
};

// Levels L[0..255] in [0, nmax] for one super-block x, and the scales to store (the first half of
// quantize_row_q4_K_ref / quantize_row_q5_K_ref).
K4Scales quantize_k4_super_block(const float* x, int nmax, const ScaleSearch& search, uint8_t* L);

// The same with importance weights qw (256 floats), as quantize_row_q4_K_impl / q5_K_impl: levels
// weighted by qw * sqrt(sigma^2 + x^2), the 6-bit scales and mins by make_qp_quants over the
// sub-blocks' total weights. clamp_63: Q5_K clamps the 6-bit values to 63, Q4_K does not.
K4Scales quantize_k4_super_block_weighted(const float* x, const float* qw, int nmax, bool clamp_63, uint8_t* L);

template <typename Block>
void store_k4_scales(const K4Scales& s, Block& y) {
  y.d = s.d;
  y.dmin = s.dmin;
  for (int k = 0; k < K_SCALE_SIZE; ++k) y.scales[k] = s.packed[k];
}

// y = (d * scale_j) * level - (dmin * min_j), each product rounded, as dequantize_row_q{4,5}_K.
template <typename Block, typename Level>
void dequantize_k4(const void* src, float* dst, int64_t n, DType type, Level level) {
  const auto* blocks = static_cast<const Block*>(src);
  const int64_t nb = super_blocks(n, type);
  for (int64_t i = 0; i < nb; ++i) {
    const Block& b = blocks[i];
    const float d = fp16_to_fp32(b.d);
    const float dmin = fp16_to_fp32(b.dmin);
    for (int j = 0; j < QK_K / 32; ++j) {
      const ScaleMin6 sm = unpack_scale_min_k4(j, b.scales);
      const float dl = d * static_cast<float>(sm.scale);
      const float ml = dmin * static_cast<float>(sm.min);
      for (int e = 32 * j; e < 32 * j + 32; ++e) *dst++ = dl * static_cast<float>(level(b, e)) - ml;
    }
  }
}

// ggml_vec_dot_q{4,5}_K_q8_K's generic path: the scales go through the 8 lanes, the mins pair with
// Q8_K's 16-element group sums and are subtracted at the end.
template <typename Block, typename Level>
float vec_dot_k4(int64_t n, const void* w, const void* a, DType type, Level level) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  const int64_t nb = super_blocks(n, type);
  LaneSums sums;
  float min_part = 0.0f;
  int8_t levels[QK_K];
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < QK_K; ++e) levels[e] = static_cast<int8_t>(level(x[i], e));
    int32_t min_sum = 0;
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
