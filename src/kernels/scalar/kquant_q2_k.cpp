// Q2_K: 16 sub-blocks of 16 with 4-bit scale and 4-bit min each; 2-bit levels.
// Element e of a super-block: scale/min byte e / 16; level in qs[(e / 128) * 32 + e % 32] at bit
// 2 * ((e / 32) % 4).
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/scalar/kquant_rows.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::kquant {
namespace {

int level_q2(const block_q2_K& b, int e) {
  return (b.qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
}

void pack_levels_q2(const uint8_t* L, uint8_t* qs) {
  for (int half = 0; half < QK_K; half += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[half / 4 + l] = static_cast<uint8_t>(L[half + l] | (L[half + l + 32] << 2) |
                                              (L[half + l + 64] << 4) | (L[half + l + 96] << 6));
    }
  }
}

// Re-pick every level against the rounded scales that will actually be stored.
void requantize_q2(const float* x, const block_q2_K& y, uint8_t* L) {
  for (int j = 0; j < QK_K / 16; ++j) {
    const float d = fp16_to_fp32(y.d) * static_cast<float>(y.scales[j] & 0xF);
    if (d == 0.0f) continue;
    const float dm = fp16_to_fp32(y.dmin) * static_cast<float>(y.scales[j] >> 4);
    for (int l = 0; l < 16; ++l) {
      const int q = nearest_int((x[16 * j + l] + dm) / d);
      L[16 * j + l] = static_cast<uint8_t>(q < 0 ? 0 : (q > 3 ? 3 : q));
    }
  }
}

void quantize_block_q2(const float* x, block_q2_K& y) {
  constexpr ScaleSearch kSearch{-0.5f, 0.1f, 15, true};
  constexpr float kMaxQuant = 15.0f;  // 4-bit sub-block scales and mins
  uint8_t L[QK_K];
  uint8_t aux[16];
  float weights[16];
  float scales[QK_K / 16];
  float mins[QK_K / 16];
  float max_scale = 0.0f;  // scales are positive because the min is subtracted
  float max_min = 0.0f;
  for (int j = 0; j < QK_K / 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    const ScaleMin sm = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, aux, kSearch);
    scales[j] = sm.scale;
    mins[j] = sm.min;
    if (sm.scale > max_scale) max_scale = sm.scale;
    if (sm.min > max_min) max_min = sm.min;
  }

  if (max_scale > 0.0f) {
    const float iscale = kMaxQuant / max_scale;
    for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    y.d = fp32_to_fp16(max_scale / kMaxQuant);
  } else {
    std::memset(y.scales, 0, sizeof(y.scales));
    y.d = fp32_to_fp16(0.0f);
  }
  if (max_min > 0.0f) {
    const float iscale = kMaxQuant / max_min;
    for (int j = 0; j < QK_K / 16; ++j) {
      y.scales[j] = static_cast<uint8_t>(y.scales[j] | (nearest_int(iscale * mins[j]) << 4));
    }
    y.dmin = fp32_to_fp16(max_min / kMaxQuant);
  } else {
    y.dmin = fp32_to_fp16(0.0f);
  }

  requantize_q2(x, y, L);
  pack_levels_q2(L, y.qs);
}

// quantize_row_q2_K_impl: the levels of each sub-block weighted by importance * sqrt(sigma^2 + x^2),
// the 4-bit scales and mins chosen by make_qp_quants weighted by the sub-blocks' total weight.
void quantize_block_q2_weighted(const float* x, const float* qw, block_q2_K& y) {
  constexpr ScaleSearch kSearch{-0.9f, 0.05f, 36, false};
  uint8_t L[QK_K];
  uint8_t aux[16];
  float weights[16];
  float scales[QK_K / 16];
  float mins[QK_K / 16];
  float sw[QK_K / 16];
  uint8_t Ls[QK_K / 16];
  uint8_t Lm[QK_K / 16];
  float sumx2 = 0.0f;
  for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = sumx2 / static_cast<float>(QK_K);
  for (int j = 0; j < QK_K / 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    sw[j] = 0.0f;
    for (int l = 0; l < 16; ++l) sw[j] += weights[l];
    const ScaleMin sm = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, aux, kSearch);
    scales[j] = sm.scale;
    mins[j] = sm.min;
  }
  const float dm = make_qp_quants(QK_K / 16, 15, scales, Ls, sw);
  const float mm = make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
  y.d = fp32_to_fp16(dm);
  y.dmin = fp32_to_fp16(mm);
  for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
  requantize_q2(x, y, L);
  pack_levels_q2(L, y.qs);
}

}  // namespace

void quantize_q2_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_super_blocks_weighted<block_q2_K>(src, dst, n, importance, DType::Q2_K, quantize_block_q2_weighted);
}

void dequantize_q2_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q2_K*>(src);
  const int64_t nb = super_blocks(n, DType::Q2_K);
  for (int64_t i = 0; i < nb; ++i) {
    const block_q2_K& b = blocks[i];
    const float d = fp16_to_fp32(b.d);
    const float dmin = fp16_to_fp32(b.dmin);
    for (int e = 0; e < QK_K; e += 16) {
      const float dl = d * static_cast<float>(b.scales[e / 16] & 0xF);
      const float ml = dmin * static_cast<float>(b.scales[e / 16] >> 4);
      for (int l = e; l < e + 16; ++l) *dst++ = dl * static_cast<float>(level_q2(b, l)) - ml;
    }
  }
}

void quantize_q2_K(const float* src, void* dst, int64_t n) {
  quantize_super_blocks<block_q2_K>(src, dst, n, DType::Q2_K, quantize_block_q2);
}

float vec_dot_q2_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q2_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  const int64_t nb = super_blocks(n, DType::Q2_K);
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    // The mins multiply whole 16-element groups, so they pair with Q8_K's group sums.
    int32_t min_sum = 0;
    for (int j = 0; j < QK_K / 16; ++j) min_sum += y[i].bsums[j] * (x[i].scales[j] >> 4);
    int32_t scaled_sum = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      int32_t group = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) group += y[i].qs[e] * level_q2(x[i], e);
      scaled_sum += (x[i].scales[j] & 0xF) * group;
    }
    const float dall = y[i].d * fp16_to_fp32(x[i].d);
    const float dmin = y[i].d * fp16_to_fp32(x[i].dmin);
    sum += dall * static_cast<float>(scaled_sum) - dmin * static_cast<float>(min_sum);
  }
  return sum;
}

}  // namespace okapi::quant::kquant
