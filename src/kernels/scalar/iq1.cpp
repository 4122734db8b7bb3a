// IQ1_S, IQ1_M: reference kernels, bit-compatible with ggml's dequantize_row_iq1_* and
// ggml_vec_dot_iq1_*_q8_K_generic. Groups of 8 values are points of a 2048-entry codebook of
// -1/0/1 (iq1_grid.hpp) shifted by +-1/8, under 3-bit scales (per 32 values for IQ1_S, per 16 for
// IQ1_M) and one fp16 d per 256 values. The dot product pairs with Q8_K (its block sums give the
// shift's part). The quantizers (quantize_weighted, importance required) are the IQ2 family's
// (iq1_quantize.cpp, add_iq1_quantizers).
#include <cstring>
#include <vector>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq1_grid.hpp"

namespace okapi::quant::detail {
namespace {

using iq1::block_iq1_m;
using iq1::block_iq1_s;

// Value j (-1, 0, 1) of codebook point `index`.
inline int grid_value(int index, int j) { return static_cast<int8_t>((iq1::kGrid[index] >> (8 * j)) & 0xff); }

// IQ1_S: codebook index l (0..3) of group ib.
inline int s_index(const block_iq1_s& b, int ib, int l) {
  return b.qs[4 * ib + l] | ((b.qh[ib] >> (3 * l)) & 7) << 8;
}

// IQ1_M: the scales as 4 uint16 and the fp16 d assembled from their top nibbles.
struct MScales {
  uint16_t sc[4];
  float d;
  explicit MScales(const block_iq1_m& b) {
    std::memcpy(sc, b.scales, sizeof(sc));
    const auto d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                           (sc[3] & 0xf000));
    d = fp16_to_fp32(d16);
  }
  // 2s + 1 of half h (0, 1) of group ib.
  int scale(int ib, int h) const { return 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3 * h)) & 7) + 1; }
};

// IQ1_M: codebook index of 8-value unit u (0..31) and whether its shift is negative.
inline int m_index(const block_iq1_m& b, int u) {
  return b.qs[u] | ((b.qh[u / 2] >> (4 * (u % 2))) & 7) << 8;
}
inline bool m_negative(const block_iq1_m& b, int u) { return (b.qh[u / 2] >> (4 * (u % 2) + 3)) & 1; }

void dequantize_iq1_s(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq1_s*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float dl = d * static_cast<float>(2 * ((x[i].qh[ib] >> 12) & 7) + 1);
      const float delta = x[i].qh[ib] & 0x8000 ? -iq1::kDelta : iq1::kDelta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const int index = s_index(x[i], ib, l);
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(grid_value(index, j)) + delta);
      }
    }
  }
}

void dequantize_iq1_m(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq1_m*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const MScales scales(x[i]);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      for (int l = 0; l < 4; ++l, y += 8) {
        const float dl = scales.d * static_cast<float>(scales.scale(ib, l / 2));
        const int u = 4 * ib + l;
        const float delta = m_negative(x[i], u) ? -iq1::kDelta : iq1::kDelta;
        const int index = m_index(x[i], u);
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(grid_value(index, j)) + delta);
      }
    }
  }
}

// sum over 8 activations of codebook point `index` times them.
inline int32_t grid_dot8(int index, const int8_t* q8) {
  int32_t sum = 0;
  for (int j = 0; j < 8; ++j) sum += q8[j] * grid_value(index, j);
  return sum;
}

float dot_iq1_s_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq1_s*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const int8_t* q8 = y[i].qs;
    int sumi = 0, sumi1 = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const int ls = 2 * ((x[i].qh[ib] >> 12) & 7) + 1;
      const int delta = x[i].qh[ib] & 0x8000 ? -1 : 1;
      int lsum = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) lsum += grid_dot8(s_index(x[i], ib, l), q8);
      sumi += ls * lsum;
      sumi1 += ls * delta * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
    }
    sumf += fp16_to_fp32(x[i].d) * y[i].d * (static_cast<float>(sumi) + iq1::kDelta * static_cast<float>(sumi1));
  }
  return sumf;
}

float dot_iq1_m_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq1_m*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const MScales scales(x[i]);
    const int8_t* q8 = y[i].qs;
    int sumi1 = 0, sumi2 = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      int sum1[2] = {0, 0}, sum2[2] = {0, 0};
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const int u = 4 * ib + l;
        int lsum2 = 0;
        for (int j = 0; j < 8; ++j) lsum2 += q8[j];
        sum1[l / 2] += grid_dot8(m_index(x[i], u), q8);
        sum2[l / 2] += lsum2 * (m_negative(x[i], u) ? -1 : 1);
      }
      sumi1 += sum1[0] * scales.scale(ib, 0) + sum1[1] * scales.scale(ib, 1);
      sumi2 += sum2[0] * scales.scale(ib, 0) + sum2[1] * scales.scale(ib, 1);
    }
    sumf += scales.d * y[i].d * (static_cast<float>(sumi1) + iq1::kDelta * static_cast<float>(sumi2));
  }
  return sumf;
}

}  // namespace

void add_iq1_formats(std::vector<Format>& table) {
  // quantize_ref stays null (ggml refuses IQ1_* without importance); add_iq1_quantizers fills in
  // quantize_weighted and requires_importance.
  table.push_back(reference_format(DType::IQ1_S, dequantize_iq1_s, nullptr, DType::Q8_K, dot_iq1_s_q8_K));
  table.push_back(reference_format(DType::IQ1_M, dequantize_iq1_m, nullptr, DType::Q8_K, dot_iq1_m_q8_K));
}

}  // namespace okapi::quant::detail
