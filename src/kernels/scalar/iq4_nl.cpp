// IQ4_NL: ggml's non-linear 4-bit format. Blocks of 32 values: fp16 d, then 16 bytes whose low
// nibbles index values 0..15 and high nibbles values 16..31 of a fixed 16-level codebook
// (kvalues_iq4nl); value = d * level. The quantizer searches the block scale as ggml's
// quantize_iq4_nl does with ntry = 7 (llama-quantize's and the CPU backend's from_float): start at
// d = max / -127, assign each value its nearest level, fit d by weighted least squares (weights
// x^2, or importance * sqrt(sigma^2 + x^2) with an importance matrix), then try 15 other starting
// scales and keep the best fit. IQ4_XS (scalar/iq4_xs.cpp) shares the quantizer
// (quantize_iq4_blocks, ggml's quantize_row_iq4_nl_impl). The dot product pairs with Q8_0.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no fused multiply-adds, as ggml's reference

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq4_levels.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::detail {
namespace {

constexpr int kBlock = 32;
constexpr int kTries = 7;
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS
const auto& kLevels = kIq4Levels;

// The index of the level nearest to x (ties to the upper level unless strictly nearer the lower),
// by bisection as ggml's best_index_int8.
int nearest_level(float x) {
  if (x <= kLevels[0]) return 0;
  if (x >= kLevels[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < kLevels[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - kLevels[hi - 1] < kLevels[hi] - x ? hi - 1 : hi;
}

// The levels of xb at inverse scale id into L (may be null), and the weighted sums
// sum(w q x), sum(w q^2) of the fit.
void assign(const float* xb, const float* w, float id, uint8_t* L, float* sum_qx, float* sum_q2) {
  float qx = 0.0f, q2 = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const int l = nearest_level(id * xb[j]);
    if (L != nullptr) L[j] = static_cast<uint8_t>(l);
    const float q = kLevels[l];
    qx += w[j] * q * xb[j];
    q2 += w[j] * q * q;
  }
  *sum_qx = qx;
  *sum_q2 = q2;
}

// The best scale of one block of 32 (0 for a block below ggml's GROUP_MAX_EPS): start at
// max / -127, fit by weighted least squares, then try 15 other starting scales.
float block_scale(const float* xb, const float* w, uint8_t* L) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  float d = -max / static_cast<float>(kLevels[0]);
  float sum_qx, sum_q2;
  assign(xb, w, 1.0f / d, L, &sum_qx, &sum_q2);
  d = sum_q2 > 0 ? sum_qx / sum_q2 : 0.0f;
  float best = d * sum_qx;
  for (int t = -kTries; t <= kTries; ++t) {
    assign(xb, w, static_cast<float>(t + kLevels[0]) / max, nullptr, &sum_qx, &sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      d = sum_qx / sum_q2;
      best = d * sum_qx;
    }
  }
  return d;
}

}  // namespace

void quantize_iq4_blocks(int n, const float* x, uint16_t* dh, uint8_t* qs, uint16_t* scales_h, uint8_t* scales_l,
                         const float* importance) {
  constexpr int kMaxBlocks = QK_K / kBlock;
  const int nb = n / kBlock;
  float sigma2 = 0.0f;
  for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.0f / static_cast<float>(n);
  std::memset(qs, 0, static_cast<size_t>(n / 2));
  *dh = fp32_to_fp16(0.0f);

  uint8_t L[QK_K];
  float scales[kMaxBlocks];
  float max_scale = 0.0f, amax_scale = 0.0f;
  for (int ib = 0; ib < nb; ++ib) {
    const float* xb = x + ib * kBlock;
    float w[kBlock];
    for (int j = 0; j < kBlock; ++j) {
      w[j] = importance != nullptr ? importance[ib * kBlock + j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
    }
    scales[ib] = block_scale(xb, w, L + ib * kBlock);
    const float abs_d = std::fabs(scales[ib]);
    if (abs_d > amax_scale) {
      amax_scale = abs_d;
      max_scale = scales[ib];
    }
  }

  if (nb > 1) {
    // One fp16 scale for the super-block, a 6-bit signed multiple of it per block.
    *scales_h = 0;
    const float d = -max_scale / 32;
    *dh = fp32_to_fp16(d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int ib = 0; ib < nb; ++ib) {
      const int l = std::clamp(kquant::nearest_int(id * scales[ib]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
      for (int j = 0; j < kBlock; ++j) L[ib * kBlock + j] = static_cast<uint8_t>(nearest_level(idl * x[ib * kBlock + j]));
      const int stored = l + 32;
      if (ib % 2 == 0) {
        scales_l[ib / 2] = static_cast<uint8_t>(stored & 0xF);
      } else {
        scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | (stored & 0xF) << 4);
      }
      *scales_h = static_cast<uint16_t>(*scales_h | (stored >> 4) << (2 * ib));
    }
  } else {
    *dh = fp32_to_fp16(scales[0]);
    const float id = scales[0] != 0.0f ? 1.0f / scales[0] : 0.0f;
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(nearest_level(id * x[j]));
  }
  for (int i = 0; i < n / kBlock; ++i) {
    for (int j = 0; j < kBlock / 2; ++j) qs[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | L[32 * i + 16 + j] << 4);
  }
}

namespace {

void quantize_iq4_nl(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_iq4_nl*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) quantize_iq4_blocks(kBlock, x + b * kBlock, &y[b].d, y[b].qs, nullptr, nullptr, nullptr);
}

// ggml's quantize_iq4_nl with quant_weights: the importance of each column of the block.
void quantize_iq4_nl_weighted(const float* x, void* dst, int64_t n, const float* importance) {
  auto* y = static_cast<block_iq4_nl*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    quantize_iq4_blocks(kBlock, x + b * kBlock, &y[b].d, y[b].qs, nullptr, nullptr, importance + b * kBlock);
  }
}

void dequantize_iq4_nl(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq4_nl*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kBlock / 2; ++j) {
      y[j] = d * kLevels[x[b].qs[j] & 0xF];
      y[j + kBlock / 2] = d * kLevels[x[b].qs[j] >> 4];
    }
  }
}

// ggml's scalar vec_dot_iq4_nl_q8_0: per block (d_w * d_a) * sum(level * a).
float dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq4_nl*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    int sumi1 = 0, sumi2 = 0;
    for (int j = 0; j < kBlock / 2; ++j) {
      sumi1 += y[b].qs[j] * kLevels[x[b].qs[j] & 0xF];
      sumi2 += y[b].qs[j + kBlock / 2] * kLevels[x[b].qs[j] >> 4];
    }
    sum += fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d) * static_cast<float>(sumi1 + sumi2);
  }
  return sum;
}

}  // namespace

void add_iq4_nl_format(std::vector<Format>& table) {
  Format f = reference_format(DType::IQ4_NL, dequantize_iq4_nl, quantize_iq4_nl, DType::Q8_0, dot_iq4_nl_q8_0);
  f.quantize_weighted = quantize_iq4_nl_weighted;
  table.push_back(f);
}

}  // namespace okapi::quant::detail
