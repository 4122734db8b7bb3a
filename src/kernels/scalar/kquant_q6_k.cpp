// Q6_K: 16 sub-blocks of 16 with int8 scales; 6-bit levels stored + 32. Element e of a
// super-block: h = e / 128, r = e % 128, k = r / 32, l = r % 32; low 4 bits in
// ql[h * 64 + (k % 2) * 32 + l] (high nibble for k >= 2), top 2 bits in qh[h * 32 + l] at bit 2k.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include <cstring>

#include "core/half.hpp"
#include "kernels/scalar/kquant_rows.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::kquant {
namespace {

int level_q6(const block_q6_K& b, int e) {
  const int h = e / 128;
  const int k = (e % 128) / 32;
  const int l = e % 32;
  const int low = (b.ql[h * 64 + (k % 2) * 32 + l] >> (4 * (k / 2))) & 0xF;
  const int high = (b.qh[h * 32 + l] >> (2 * k)) & 3;
  return (low | (high << 4)) - 32;
}

void pack_levels_q6(const int8_t* L, block_q6_K& y) {
  for (int h = 0; h < 2; ++h) {
    const int8_t* Lh = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      y.ql[h * 64 + l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
      y.ql[h * 64 + 32 + l] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
      y.qh[h * 32 + l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                              ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
    }
  }
}

// qw: the importance weights of the block (quantize_row_q6_K_impl uses them as they are), or null.
void quantize_block_q6_with(const float* x, const float* qw, block_q6_K& y) {
  constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int j = 0; j < QK_K / 16; ++j) {
    scales[j] = make_qx_quants(16, 32, x + 16 * j, L + 16 * j, qw != nullptr ? qw + 16 * j : nullptr);
  }
  float max_abs_scale = 0.0f;
  const float max_scale = signed_absmax(QK_K / 16, scales, max_abs_scale);
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(&y, 0, sizeof(y));
    y.d = fp32_to_fp16(0.0f);
    return;
  }

  const float iscale = -128.0f / max_scale;
  y.d = fp32_to_fp16(1.0f / iscale);
  for (int j = 0; j < QK_K / 16; ++j) {
    const int s = nearest_int(iscale * scales[j]);
    y.scales[j] = static_cast<int8_t>(s < 127 ? s : 127);
  }

  // Re-pick every level against the rounded scales that will actually be stored.
  requantize_groups16(x, fp16_to_fp32(y.d), 32, [&y](int j) { return y.scales[j]; }, L);
  pack_levels_q6(L, y);
}

void quantize_block_q6(const float* x, block_q6_K& y) { quantize_block_q6_with(x, nullptr, y); }

}  // namespace

void quantize_q6_K_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_super_blocks_weighted<block_q6_K>(src, dst, n, importance, DType::Q6_K, quantize_block_q6_with);
}

void dequantize_q6_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q6_K*>(src);
  const int64_t nb = super_blocks(n, DType::Q6_K);
  for (int64_t i = 0; i < nb; ++i) {
    const block_q6_K& b = blocks[i];
    const float d = fp16_to_fp32(b.d);
    for (int e = 0; e < QK_K; ++e) {
      *dst++ = d * static_cast<float>(b.scales[e / 16]) * static_cast<float>(level_q6(b, e));
    }
  }
}

void quantize_q6_K(const float* src, void* dst, int64_t n) {
  quantize_super_blocks<block_q6_K>(src, dst, n, DType::Q6_K, quantize_block_q6);
}

float vec_dot_q6_K(int64_t n, const void* w, const void* a) {
  const auto group_scale = [](const block_q6_K& b, int j) { return b.scales[j]; };
  return vec_dot_groups16<block_q6_K>(n, w, a, DType::Q6_K, level_q6, group_scale);
}

}  // namespace okapi::quant::kquant
