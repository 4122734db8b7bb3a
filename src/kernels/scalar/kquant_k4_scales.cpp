#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include "kernels/scalar/kquant_k4_scales.hpp"

#include <algorithm>
#include <cmath>

#include "core/half.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::kquant {

namespace {

// Re-pick every level against the rounded scales that will actually be stored.
void requantize_k4(const float* x, const K4Scales& s, int nmax, uint8_t* L) {
  for (int j = 0; j < QK_K / 32; ++j) {
    const ScaleMin6 sm = unpack_scale_min_k4(j, s.packed);
    const float d = fp16_to_fp32(s.d) * static_cast<float>(sm.scale);
    if (d == 0.0f) continue;
    const float dm = fp16_to_fp32(s.dmin) * static_cast<float>(sm.min);
    for (int l = 0; l < 32; ++l) {
      const int q = nearest_int((x[32 * j + l] + dm) / d);
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, nmax));
    }
  }
}

}  // namespace

K4Scales quantize_k4_super_block(const float* x, int nmax, const ScaleSearch& search, uint8_t* L) {
  constexpr int kSub = QK_K / 32;
  uint8_t aux[32];
  float weights[32];
  float scales[kSub];
  float mins[kSub];
  float max_scale = 0.0f;  // scales are positive because the min is subtracted
  float max_min = 0.0f;
  for (int j = 0; j < kSub; ++j) {
    const float* xs = x + 32 * j;
    // Weight each element by the sub-block's RMS plus its own magnitude.
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    const ScaleMin sm = make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, aux, search);
    scales[j] = sm.scale;
    mins[j] = sm.min;
    if (sm.scale > max_scale) max_scale = sm.scale;
    if (sm.min > max_min) max_min = sm.min;
  }

  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t ls[kSub];
  uint8_t lm[kSub];
  for (int j = 0; j < kSub; ++j) {
    // ggml narrows to uint8 before the clamp; keep that for out-of-range (NaN/inf) input.
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  K4Scales out;
  pack_scale_min_k4(ls, lm, out.packed);
  out.d = fp32_to_fp16(max_scale / 63.0f);
  out.dmin = fp32_to_fp16(max_min / 63.0f);
  requantize_k4(x, out, nmax, L);
  return out;
}

K4Scales quantize_k4_super_block_weighted(const float* x, const float* qw, int nmax, bool clamp_63, uint8_t* L) {
  constexpr int kSub = QK_K / 32;
  constexpr ScaleSearch kSearch{-0.9f, 0.05f, 36, false};
  uint8_t aux[32];
  float weights[32];
  float scales[kSub];
  float mins[kSub];
  float sw[kSub];
  float sum_x2 = 0.0f;
  for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2.0f * sum_x2 / static_cast<float>(QK_K);
  for (int j = 0; j < kSub; ++j) {
    for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0.0f;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    const ScaleMin sm = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, aux, kSearch);
    scales[j] = sm.scale;
    mins[j] = sm.min;
  }
  uint8_t ls[kSub];
  uint8_t lm[kSub];
  const float d_block = make_qp_quants(kSub, 63, scales, ls, sw);
  const float m_block = make_qp_quants(kSub, 63, mins, lm, sw);
  if (clamp_63) {
    for (int j = 0; j < kSub; ++j) {
      ls[j] = std::min<uint8_t>(63, ls[j]);
      lm[j] = std::min<uint8_t>(63, lm[j]);
    }
  }
  K4Scales out;
  pack_scale_min_k4(ls, lm, out.packed);
  out.d = fp32_to_fp16(d_block);
  out.dmin = fp32_to_fp16(m_block);
  requantize_k4(x, out, nmax, L);
  return out;
}

}  // namespace okapi::quant::kquant
