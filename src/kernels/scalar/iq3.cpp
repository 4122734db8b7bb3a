// IQ3_XXS, IQ3_S: reference kernels, bit-compatible with ggml's dequantize_row_iq3_* and
// ggml_vec_dot_iq3_*_q8_K_generic. Both store 32-value groups of eight 4-value grid points
// (iq3_grids.hpp) with one sign per value and a 4-bit group scale under one fp16 d per 256 values;
// the dot product pairs with Q8_K. The quantizers are in iq3_quantize.cpp.
#include <cstring>
#include <vector>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq3_grids.hpp"
#include "kernels/scalar/iq3_quantize.hpp"

namespace okapi::quant::detail {
namespace {

using iq3::block_iq3_s;
using iq3::block_iq3_xxs;

// Magnitude j (0..3) of grid point `point`.
inline int magnitude(uint32_t point, int j) { return static_cast<int>((point >> (8 * j)) & 0xff); }

// The uint32 of group g of an IQ3_XXS block: signs and scale.
inline uint32_t xxs_group_word(const block_iq3_xxs& b, int g) {
  uint32_t w;
  std::memcpy(&w, b.qs + QK_K / 4 + 4 * g, sizeof(w));
  return w;
}

// The grid point of IQ3_S index slot k (0..63) of a block: 8 low bits plus qh's ninth.
inline uint32_t s_point(const block_iq3_s& b, int k) {
  return iq3::kSGrid[b.qs[k] | ((b.qh[k / 8] >> (k % 8)) & 1) << 8];
}

void dequantize_iq3_xxs(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq3_xxs*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int g = 0; g < QK_K / 32; ++g) {
      const uint32_t word = xxs_group_word(x[i], g);
      const float db = d * (0.5f + static_cast<float>(word >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = iq3::kSigns[(word >> (7 * l)) & 127];
        for (int h = 0; h < 2; ++h) {
          const uint32_t point = iq3::kXxsGrid[x[i].qs[8 * g + 2 * l + h]];
          for (int j = 0; j < 4; ++j) {
            y[4 * h + j] = db * static_cast<float>(magnitude(point, j)) * ((signs >> (4 * h + j)) & 1 ? -1.f : 1.f);
          }
        }
        y += 8;
      }
    }
  }
}

void dequantize_iq3_s(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq3_s*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int g = 0; g < QK_K / 32; ++g) {
      const float db = d * static_cast<float>(1 + 2 * ((x[i].scales[g / 2] >> (4 * (g % 2))) & 0xf));
      for (int k = 0; k < 8; ++k) {
        const uint32_t point = s_point(x[i], 8 * g + k);
        const uint8_t signs = x[i].signs[4 * g + k / 2];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * static_cast<float>(magnitude(point, j)) * ((signs >> (4 * (k % 2) + j)) & 1 ? -1.f : 1.f);
        }
        y += 4;
      }
    }
  }
}

// Signed sum of 8 activations against the grid points p0 (values 0..3) and p1 (4..7).
inline int32_t signed_dot8(uint32_t p0, uint32_t p1, uint8_t signs, const int8_t* q8) {
  int32_t sum = 0;
  for (int j = 0; j < 4; ++j) {
    sum += magnitude(p0, j) * q8[j] * ((signs >> j) & 1 ? -1 : 1);
    sum += magnitude(p1, j) * q8[j + 4] * ((signs >> (j + 4)) & 1 ? -1 : 1);
  }
  return sum;
}

float dot_iq3_xxs_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq3_xxs*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < QK_K / 32; ++g) {
      const uint32_t word = xxs_group_word(x[i], g);
      int32_t sumi = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        sumi += signed_dot8(iq3::kXxsGrid[x[i].qs[8 * g + 2 * l]], iq3::kXxsGrid[x[i].qs[8 * g + 2 * l + 1]],
                            iq3::kSigns[(word >> (7 * l)) & 127], q8);
      }
      bsum += sumi * static_cast<int32_t>(2 * (word >> 28) + 1);
    }
    sumf += d * static_cast<float>(bsum);
  }
  return 0.25f * sumf;
}

float dot_iq3_s_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq3_s*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < QK_K / 32; ++g) {
      int32_t sumi = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        sumi += signed_dot8(s_point(x[i], 8 * g + 2 * l), s_point(x[i], 8 * g + 2 * l + 1), x[i].signs[4 * g + l], q8);
      }
      bsum += sumi * (2 * ((x[i].scales[g / 2] >> (4 * (g % 2))) & 0xf) + 1);
    }
    sumf += d * static_cast<float>(bsum);
  }
  return sumf;
}

}  // namespace

void add_iq3_formats(std::vector<Format>& table) {
  Format xxs = reference_format(DType::IQ3_XXS, dequantize_iq3_xxs, iq3::quantize_xxs, DType::Q8_K, dot_iq3_xxs_q8_K);
  xxs.quantize_weighted = iq3::quantize_xxs_weighted;
  table.push_back(xxs);
  Format s = reference_format(DType::IQ3_S, dequantize_iq3_s, iq3::quantize_s, DType::Q8_K, dot_iq3_s_q8_K);
  s.quantize_weighted = iq3::quantize_s_weighted;
  table.push_back(s);
}

}  // namespace okapi::quant::detail
