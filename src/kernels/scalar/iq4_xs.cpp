// IQ4_XS: ggml's 4.25-bit non-linear format. Super-blocks of 256 values (136 bytes): fp16 d,
// scales_h (2 high bits of each of the 8 block scales), scales_l (4 low bits each), then 128 bytes
// of nibbles, 16 per block of 32 as IQ4_NL lays them out (low nibbles values 0..15, high 16..31).
// Value = d * (ls - 32) * kvalues_iq4nl[nibble], ls the 6-bit block scale. The quantizer is
// IQ4_NL's (quantize_iq4_blocks, ggml's quantize_row_iq4_nl_impl with super_block_size 256); the
// dot product pairs with Q8_K as ggml_vec_dot_iq4_xs_q8_K_generic.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no fused multiply-adds, as ggml's reference

#include <vector>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq4_levels.hpp"

namespace okapi::quant::detail {

int iq4_xs_block_scale(const uint8_t* scales_l, uint16_t scales_h, int ib) {
  const int low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
  const int high = (scales_h >> (2 * ib)) & 3;
  return (low | high << 4) - 32;
}

namespace {

void quantize_iq4_xs(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_iq4_xs*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    quantize_iq4_blocks(QK_K, x + b * QK_K, &y[b].d, y[b].qs, &y[b].scales_h, y[b].scales_l, nullptr);
  }
}

void quantize_iq4_xs_weighted(const float* x, void* dst, int64_t n, const float* importance) {
  auto* y = static_cast<block_iq4_xs*>(dst);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    quantize_iq4_blocks(QK_K, x + b * QK_K, &y[b].d, y[b].qs, &y[b].scales_h, y[b].scales_l, importance + b * QK_K);
  }
}

void dequantize_iq4_xs(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq4_xs*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const uint8_t* qs = x[b].qs;
    for (int ib = 0; ib < QK_K / 32; ++ib, y += 32, qs += 16) {
      const float dl = d * static_cast<float>(iq4_xs_block_scale(x[b].scales_l, x[b].scales_h, ib));
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIq4Levels[qs[j] & 0xF];
        y[j + 16] = dl * kIq4Levels[qs[j] >> 4];
      }
    }
  }
}

// ggml_vec_dot_iq4_xs_q8_K_generic: per block of 32, (d_w * d_a * (ls - 32)) * sum(level * a).
float dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq4_xs*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d4d8 = fp16_to_fp32(x[b].d) * y[b].d;
    const uint8_t* qs = x[b].qs;
    const int8_t* q8 = y[b].qs;
    for (int ib = 0; ib < QK_K / 32; ++ib, qs += 16, q8 += 32) {
      const float dl = d4d8 * static_cast<float>(iq4_xs_block_scale(x[b].scales_l, x[b].scales_h, ib));
      int sum1 = 0, sum2 = 0;
      for (int j = 0; j < 16; ++j) {
        sum1 += q8[j] * kIq4Levels[qs[j] & 0xF];
        sum2 += q8[j + 16] * kIq4Levels[qs[j] >> 4];
      }
      sum += dl * static_cast<float>(sum1 + sum2);
    }
  }
  return sum;
}

}  // namespace

void add_iq4_xs_format(std::vector<Format>& table) {
  Format f = reference_format(DType::IQ4_XS, dequantize_iq4_xs, quantize_iq4_xs, DType::Q8_K, dot_iq4_xs_q8_K);
  f.quantize_weighted = quantize_iq4_xs_weighted;
  table.push_back(f);
}

}  // namespace okapi::quant::detail
