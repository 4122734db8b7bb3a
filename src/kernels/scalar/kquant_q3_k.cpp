// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales; 3-bit levels in [-4, 3].
// Element e of a super-block: low 2 bits in qs[(e / 128) * 32 + e % 32] at bit 2 * ((e / 32) % 4),
// high bit in hmask[e % 32] bit e / 32 (set means "no -4"). Scale j: low nibble in scales[j % 8]
// (high half for j >= 8), top 2 bits in scales[8 + j % 4] at bit 2 * (j / 4); stored + 32.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/scalar/kquant_rows.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::kquant {
namespace {

int scale_q3(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

int level_q3(const block_q3_K& b, int e) {
  const int low = (b.qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
  const bool high = (b.hmask[e % 32] >> (e / 32)) & 1;
  return low - (high ? 0 : 4);
}

void pack_scales_q3(const float* scales, float iscale, uint8_t* packed) {
  std::memset(packed, 0, 12);
  for (int j = 0; j < QK_K / 16; ++j) {
    // ggml narrows to int8 before clamping; keep that for out-of-range (NaN/inf) input.
    const int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
    const int stored = (l < -32 ? -32 : (l > 31 ? 31 : l)) + 32;
    if (j < 8) {
      packed[j] = static_cast<uint8_t>(stored & 0xF);
    } else {
      packed[j - 8] = static_cast<uint8_t>(packed[j - 8] | ((stored & 0xF) << 4));
    }
    packed[8 + j % 4] = static_cast<uint8_t>(packed[8 + j % 4] | ((stored >> 4) << (2 * (j / 4))));
  }
}

void pack_levels_q3(int8_t* L, block_q3_K& y) {
  std::memset(y.hmask, 0, sizeof(y.hmask));
  for (int e = 0; e < QK_K; ++e) {
    if (L[e] > 3) {
      y.hmask[e % 32] = static_cast<uint8_t>(y.hmask[e % 32] | (1 << (e / 32)));
      L[e] = static_cast<int8_t>(L[e] - 4);
    }
  }
  for (int half = 0; half < QK_K; half += 128) {
    for (int l = 0; l < 32; ++l) {
      y.qs[half / 4 + l] = static_cast<uint8_t>(L[half + l] | (L[half + l + 32] << 2) |
                                                (L[half + l + 64] << 4) | (L[half + l + 96] << 6));
    }
  }
}

void quantize_block_q3(const float* x, block_q3_K& y) {
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int j = 0; j < QK_K / 16; ++j) scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
  float amax = 0.0f;
  const float max_scale = signed_absmax(QK_K / 16, scales, amax);

  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    pack_scales_q3(scales, iscale, y.scales);
    y.d = fp32_to_fp16(1.0f / iscale);
  } else {
    std::memset(y.scales, 0, sizeof(y.scales));
    y.d = fp32_to_fp16(0.0f);
  }

  // Re-pick every level against the rounded scales that will actually be stored.
  requantize_groups16(x, fp16_to_fp32(y.d), 4, [&y](int j) { return scale_q3(y.scales, j); }, L);
  pack_levels_q3(L, y);
}

// quantize_row_q3_K_impl with importance: levels weighted by importance * sqrt(sigma^2 + x^2), the
// 6-bit group scales by make_qx_quants over the groups' total weights (no clamp: they fit).
void quantize_block_q3_weighted(const float* x, const float* qw, block_q3_K& y) {
  int8_t L[QK_K];
  float scales[QK_K / 16];
  float weights[16];
  float sw[QK_K / 16];
  int8_t Ls[QK_K / 16];
  float sumx2 = 0.0f;
  for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = 2.0f * sumx2 / static_cast<float>(QK_K);
  for (int j = 0; j < QK_K / 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    float sumw = 0.0f;
    for (int l = 0; l < 16; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weights);
  }
  std::memset(y.scales, 0, sizeof(y.scales));
  const float d_block = make_qx_quants(QK_K / 16, 32, scales, Ls, sw);
  for (int j = 0; j < QK_K / 16; ++j) {
    const int l = Ls[j];
    if (j < 8) {
      y.scales[j] = static_cast<uint8_t>(l & 0xF);
    } else {
      y.scales[j - 8] = static_cast<uint8_t>(y.scales[j - 8] | ((l & 0xF) << 4));
    }
    y.scales[8 + j % 4] = static_cast<uint8_t>(y.scales[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
  }
  y.d = fp32_to_fp16(d_block);
  requantize_groups16(x, fp16_to_fp32(y.d), 4, [&y](int j) { return scale_q3(y.scales, j); }, L);
  pack_levels_q3(L, y);
}

}  // namespace

void quantize_q3_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_super_blocks_weighted<block_q3_K>(src, dst, n, importance, DType::Q3_K, quantize_block_q3_weighted);
}

void dequantize_q3_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q3_K*>(src);
  const int64_t nb = super_blocks(n, DType::Q3_K);
  for (int64_t i = 0; i < nb; ++i) {
    const block_q3_K& b = blocks[i];
    const float d = fp16_to_fp32(b.d);
    for (int e = 0; e < QK_K; e += 16) {
      const float dl = d * static_cast<float>(scale_q3(b.scales, e / 16));
      for (int l = e; l < e + 16; ++l) *dst++ = dl * static_cast<float>(level_q3(b, l));
    }
  }
}

void quantize_q3_K(const float* src, void* dst, int64_t n) {
  quantize_super_blocks<block_q3_K>(src, dst, n, DType::Q3_K, quantize_block_q3);
}

float vec_dot_q3_K(int64_t n, const void* w, const void* a) {
  const auto group_scale = [](const block_q3_K& b, int j) { return scale_q3(b.scales, j); };
  return vec_dot_groups16<block_q3_K>(n, w, a, DType::Q3_K, level_q3, group_scale);
}

}  // namespace okapi::quant::kquant
