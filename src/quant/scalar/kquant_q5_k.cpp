// Q5_K: Q4_K's layout plus a fifth bit per level. Element e of a super-block: sub-block j = e / 32,
// low 4 bits in qs[(j / 2) * 32 + e % 32] (low nibble for even j), bit 4 in qh[e % 32] bit j.
#include "quant/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include <cstring>

#include "core/half.hpp"
#include "quant/scalar/kquant_k4_scales.hpp"
#include "quant/scalar/kquant_rows.hpp"

namespace okapi::quant::kquant {
namespace {

int level_q5(const block_q5_K& b, int e) {
  const int j = e / 32;
  const int low = (b.qs[(j / 2) * 32 + e % 32] >> (4 * (j % 2))) & 0xF;
  return low + (((b.qh[e % 32] >> j) & 1) << 4);
}

void quantize_block_q5(const float* x, block_q5_K& y) {
  constexpr ScaleSearch kSearch{-0.5f, 0.1f, 15, false};
  uint8_t L[QK_K];
  const K4Scales s = quantize_k4_super_block(x, 31, kSearch, L);
  y.d = s.d;
  y.dmin = s.dmin;
  for (int k = 0; k < K_SCALE_SIZE; ++k) y.scales[k] = s.packed[k];
  std::memset(y.qh, 0, sizeof(y.qh));
  for (int e = 0; e < QK_K; ++e) {
    const int j = e / 32;
    if (L[e] > 15) y.qh[e % 32] = static_cast<uint8_t>(y.qh[e % 32] | (1 << j));
    const int low = L[e] & 0xF;
    uint8_t& q = y.qs[(j / 2) * 32 + e % 32];
    q = static_cast<uint8_t>(j % 2 == 0 ? low : (q | (low << 4)));
  }
}

}  // namespace

void dequantize_q5_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q5_K*>(src);
  const int64_t nb = super_blocks(n, DType::Q5_K);
  for (int64_t i = 0; i < nb; ++i) {
    const block_q5_K& b = blocks[i];
    const float d = fp16_to_fp32(b.d);
    const float dmin = fp16_to_fp32(b.dmin);
    for (int j = 0; j < QK_K / 32; ++j) {
      const ScaleMin6 sm = unpack_scale_min_k4(j, b.scales);
      const float dl = d * static_cast<float>(sm.scale);
      const float ml = dmin * static_cast<float>(sm.min);
      for (int e = 32 * j; e < 32 * j + 32; ++e) *dst++ = dl * static_cast<float>(level_q5(b, e)) - ml;
    }
  }
}

void quantize_q5_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q5_K*>(dst);
  const int64_t nb = super_blocks(n, DType::Q5_K);
  for (int64_t i = 0; i < nb; ++i) quantize_block_q5(src + i * QK_K, blocks[i]);
}

float vec_dot_q5_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q5_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  const int64_t nb = super_blocks(n, DType::Q5_K);
  LaneSums sums;
  float min_part = 0.0f;
  int8_t levels[QK_K];
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < QK_K; ++e) levels[e] = static_cast<int8_t>(level_q5(x[i], e));
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
