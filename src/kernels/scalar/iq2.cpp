#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no fused multiply-adds below
//
// IQ2_XXS, IQ2_XS, IQ2_S: ggml's 2-bit codebook formats (layouts in iq2_blocks.hpp). Reference
// dequantize and dot product with Q8_K activations (ggml_vec_dot_iq2_*_q8_K_generic: exact integer
// sums per block, one float multiply-add per block, times 1/8), and ggml's quantizers
// (quantize_row_iq2_xxs_impl, _xs_impl, quantize_row_iq2_s_impl), operation for operation.
// IQ2_XXS and IQ2_XS need an importance matrix (ggml asserts one); IQ2_S also quantizes without.
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq2_blocks.hpp"
#include "kernels/scalar/iq_grids.hpp"
#include "kernels/scalar/iq_grid_search.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::detail {
namespace {

// Group g (0..31) of a block: the grid point (8 bytes, one per value) and the sign byte (bit j
// negates value j). The scale index of the group's 32 (XXS) or 16 (XS, S) values comes apart.
struct Group {
  uint64_t grid;
  uint8_t signs;
};

uint32_t iq2_xxs_word(const block_iq2_xxs& b, int ib32, int half) {
  uint32_t w;
  std::memcpy(&w, reinterpret_cast<const uint8_t*>(b.qs) + 8 * ib32 + 4 * half, sizeof(w));
  return w;
}
Group iq2_xxs_group(const block_iq2_xxs& b, int g) {
  const uint32_t idx = iq2_xxs_word(b, g / 4, 0), sgn = iq2_xxs_word(b, g / 4, 1);
  const int l = g % 4;
  return {iq::kIq2xxsGrid[(idx >> (8 * l)) & 0xFF], iq::kSigns[(sgn >> (7 * l)) & 127]};
}
// The 4-bit scale of the 32 values ib32.
int iq2_xxs_scale(const block_iq2_xxs& b, int ib32) { return static_cast<int>(iq2_xxs_word(b, ib32, 1) >> 28); }

Group iq2_xs_group(const block_iq2_xs& b, int g) {
  return {iq::kIq2xsGrid[b.qs[g] & 511], iq::kSigns[b.qs[g] >> 9]};
}
// The 4-bit scale of the 16 values ib16.
int iq2_xs_scale(const uint8_t* scales, int ib16) { return (scales[ib16 / 2] >> (4 * (ib16 % 2))) & 0xF; }

Group iq2_s_group(const block_iq2_s& b, int g) {
  const int high = (b.qh[g / 4] >> (2 * (g % 4))) & 3;
  return {iq::kIq2sGrid[b.qs[g] | (high << 8)], b.qs[QK_K / 8 + g]};
}

using kquant::nearest_int;

constexpr int kMaxQ = 3;  // levels 0..2, values 2l + 1 in {1, 3, 5}

float sign_of(uint8_t signs, int j) { return (signs & iq::kSignMask[j]) != 0 ? -1.f : 1.f; }
int isign_of(uint8_t signs, int j) { return (signs & iq::kSignMask[j]) != 0 ? -1 : 1; }

void dequantize_group(const Group& g, float db, float* y) {
  for (int j = 0; j < 8; ++j) {
    y[j] = db * static_cast<float>(static_cast<uint8_t>(g.grid >> (8 * j))) * sign_of(g.signs, j);
  }
}

int dot_group(const Group& g, const int8_t* q8) {
  int sum = 0;
  for (int j = 0; j < 8; ++j) sum += static_cast<uint8_t>(g.grid >> (8 * j)) * q8[j] * isign_of(g.signs, j);
  return sum;
}

// ---- dequantize / vec_dot

void dequantize_iq2_xxs(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq2_xxs*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
      const float db = d * (0.5f + static_cast<float>(iq2_xxs_scale(x[i], ib32))) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) dequantize_group(iq2_xxs_group(x[i], 4 * ib32 + l), db, y);
    }
  }
}

void dequantize_iq2_xs(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq2_xs*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int g = 0; g < QK_K / 8; ++g, y += 8) {
      const float db = d * (0.5f + static_cast<float>(iq2_xs_scale(x[i].scales, g / 2))) * 0.25f;
      dequantize_group(iq2_xs_group(x[i], g), db, y);
    }
  }
}

void dequantize_iq2_s(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq2_s*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int g = 0; g < QK_K / 8; ++g, y += 8) {
      const float db = d * (0.5f + static_cast<float>(iq2_xs_scale(x[i].scales, g / 2))) * 0.25f;
      dequantize_group(iq2_s_group(x[i], g), db, y);
    }
  }
}

float dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq2_xxs*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d) * y[i].d;
    int bsum = 0;
    for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
      int sumi = 0;
      for (int l = 0; l < 4; ++l) sumi += dot_group(iq2_xxs_group(x[i], 4 * ib32 + l), y[i].qs + 32 * ib32 + 8 * l);
      bsum += sumi * (2 * iq2_xxs_scale(x[i], ib32) + 1);
    }
    sumf += d * static_cast<float>(bsum);
  }
  return 0.125f * sumf;
}

// IQ2_XS and IQ2_S share the dot's shape: per 16 values a 4-bit scale.
template <typename Block, Group (*group_of)(const Block&, int)>
float dot_16_scales_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  float sumf = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d) * y[i].d;
    int bsum = 0;
    for (int ib16 = 0; ib16 < QK_K / 16; ++ib16) {
      const int sumi = dot_group(group_of(x[i], 2 * ib16), y[i].qs + 16 * ib16) +
                       dot_group(group_of(x[i], 2 * ib16 + 1), y[i].qs + 16 * ib16 + 8);
      bsum += sumi * (2 * iq2_xs_scale(x[i].scales, ib16) + 1);
    }
    sumf += d * static_cast<float>(bsum);
  }
  return 0.125f * sumf;
}

// ---- quantizers

// The sign byte of group x[0..8) with xval = |x|; with even_parity (IQ2_XXS, IQ2_XS: 7 stored sign
// bits), an odd number of negatives flips back the element of least weight * x^2 (xval < 0 there).
uint8_t group_signs(const float* x, const float* weight, float* xval, bool even_parity) {
  int nflip = 0;
  unsigned s = 0;
  for (int i = 0; i < 8; ++i) {
    if (x[i] >= 0) {
      xval[i] = x[i];
    } else {
      xval[i] = -x[i];
      ++nflip;
      s |= 1U << i;
    }
  }
  if (!even_parity) return static_cast<uint8_t>(s);
  if (nflip % 2 != 0) {
    int imin = 0;
    float min = weight[0] * x[0] * x[0];
    for (int i = 1; i < 8; ++i) {
      const float ax = weight[i] * x[i] * x[i];
      if (ax < min) {
        min = ax;
        imin = i;
      }
    }
    xval[imin] = -xval[imin];
    s ^= 1U << imin;
  }
  return static_cast<uint8_t>(s & 127);
}

float max_of(const float* v, int n) {
  float max = v[0];
  for (int i = 1; i < n; ++i) max = max > v[i] ? max : v[i];
  return max;
}

// Levels of one group at inverse scale id (clamped to 0..2) and their code.
uint16_t round_group(const float* xval, float id, int8_t* L) {
  unsigned u = 0;
  for (int i = 0; i < 8; ++i) {
    int l = nearest_int(0.5f * (id * xval[i] - 1));
    l = l < 0 ? 0 : (l > kMaxQ - 1 ? kMaxQ - 1 : l);
    L[i] = static_cast<int8_t>(l);
    u |= static_cast<unsigned>(l) << (2 * i);
  }
  return static_cast<uint16_t>(u);
}

uint16_t code_of(const int8_t* L) {
  unsigned u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<unsigned>(L[i]) << (2 * i);
  return static_cast<uint16_t>(u);
}

// The grid index of levels already on the grid (ggml aborts otherwise; it cannot happen).
int on_grid_index(const iq::GridNeighbourhoods& grid, const int8_t* L) {
  const int index = grid.index_of(code_of(L));
  if (index < 0) throw_error("IQ2 quantizer: a group ended off the grid");
  return index;
}

// sum w x q and sum w q^2 over n values with q = 2L + 1.
void fit_sums(int n, const float* weight, const float* xval, const int8_t* L, float* sumqx, float* sumq2) {
  *sumqx = *sumq2 = 0;
  for (int i = 0; i < n; ++i) {
    const float w = weight[i];
    const auto q = static_cast<float>(2 * L[i] + 1);
    *sumqx += w * xval[i] * q;
    *sumq2 += w * q * q;
  }
}

// The 4-bit super-block scale codes: l = round((scale / d - 1) / 2) in 0..15, d = max / 31.
int scale_code(float id, float scale) {
  const int l = nearest_int(0.5f * (id * scale - 1));
  return l < 0 ? 0 : (l > 15 ? 15 : l);
}

void quantize_iq2_xxs(const float* x, void* dst, int64_t n, const float* importance) {
  iq::check_finite_row("IQ2_XXS", x, importance, n);
  const auto& grid = iq::grid_neighbourhoods(iq::SearchGrid::iq2_xxs);
  auto* y = static_cast<block_iq2_xxs*>(dst);
  for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
    const float* xbl = x + QK_K * ibl;
    uint32_t q2[2 * (QK_K / 32)] = {};
    float scales[QK_K / 32];
    float max_scale = 0;
    const float sumx2 = iq::sum_of_squares(xbl, QK_K);
    const float sigma2 = sumx2 / QK_K;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float* xb = xbl + 32 * ib;
      const float* qw = importance + QK_K * ibl + 32 * ib;
      float weight[32], waux[32], xval[32];
      int8_t L[32] = {}, Laux[32];
      uint8_t block_signs[4];
      for (int i = 0; i < 32; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);
      for (int k = 0; k < 4; ++k) block_signs[k] = group_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, true);
      scales[ib] = 0;
      if (max_of(xval, 32) < 1e-15f) continue;
      float scale = iq::make_qp_quants(32, kMaxQ + 1, xval, reinterpret_cast<uint8_t*>(L), weight);
      const float eff_max = scale * kMaxQ;
      if (eff_max <= 0) continue;
      float best = 0;
      for (int is = -6; is <= 6; ++is) {
        const float id = (2 * kMaxQ - 1 + static_cast<float>(is) * 0.1f) / eff_max;
        const float this_scale = 1 / id;
        for (int k = 0; k < 4; ++k) {
          const uint16_t u = round_group(xval + 8 * k, id, Laux + 8 * k);
          if (grid.index_of(u) < 0) iq::best_neighbour(grid, u, xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
        }
        float sumqx, sumq2;
        fit_sums(32, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
          scale = sumqx / sumq2;
          best = scale * sumqx;
          std::memcpy(L, Laux, 32);
        }
      }
      if (scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < 4; ++k) {
          const uint16_t u = round_group(xval + 8 * k, id, L + 8 * k);
          if (grid.index_of(u) < 0) iq::best_neighbour(grid, u, xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
        }
        float sumqx, sumq2;
        fit_sums(32, weight, xval, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
      }
      if (scale < 0) {  // ggml: "should never happen"; flip the signs so the scale is positive
        scale = -scale;
        for (auto& s : block_signs) s = static_cast<uint8_t>(~s & 127);
      }
      for (int k = 0; k < 4; ++k) {
        q2[2 * ib] |= static_cast<uint32_t>(on_grid_index(grid, L + 8 * k)) << (8 * k);
        q2[2 * ib + 1] |= static_cast<uint32_t>(block_signs[k]) << (7 * k);
      }
      scales[ib] = scale;
      max_scale = max_scale > scale ? max_scale : scale;
    }
    y[ibl].d = fp32_to_fp16(0.f);
    if (max_scale == 0) {
      std::memset(y[ibl].qs, 0, sizeof(y[ibl].qs));
      continue;
    }
    const float d = max_scale / 31;
    y[ibl].d = fp32_to_fp16(d);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / 32; ++ib) q2[2 * ib + 1] |= static_cast<uint32_t>(scale_code(id, scales[ib])) << 28;
    std::memcpy(y[ibl].qs, q2, sizeof(q2));
  }
}

// IQ2_XS and IQ2_S: groups of 16 values (two grid points) with a 4-bit scale each.
struct Sub16Format {
  iq::SearchGrid grid;
  bool even_parity;    // 7-bit sign indices (IQ2_XS) or full sign bytes (IQ2_S)
  float sigma2_factor;  // sigma2 = factor * sum x^2 / 256
  float group_eps;      // a group whose largest |x| is below this is zero
  float d_factor;       // stored d = max_scale / 31 * factor
};

struct Sub16Result {
  bool zero = true;     // the 16 values are (nearly) zero: nothing is stored
  float scale = 0;
  int index[2] = {0, 0};
  uint8_t signs[2] = {0, 0};
};

Sub16Result quantize_sub16(const iq::GridNeighbourhoods& grid, const Sub16Format& f, const float* xb,
                           const float* qw, float sigma2) {
  float weight[16], waux[16], xval[16];
  int8_t L[16] = {}, Laux[16];
  Sub16Result r;
  if (qw != nullptr) {
    for (int i = 0; i < 16; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
  } else {
    for (int i = 0; i < 16; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
  }
  for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
  for (int k = 0; k < 2; ++k) r.signs[k] = group_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, f.even_parity);
  const float max = max_of(xval, 16);
  if (max < f.group_eps) return r;
  r.zero = false;
  float best = 0;
  float scale = max / (2 * kMaxQ - 1);
  bool on_grid[2] = {true, true};
  for (int is = -9; is <= 9; ++is) {
    const float id = (2 * kMaxQ - 1 + static_cast<float>(is) * 0.1f) / max;
    const float this_scale = 1 / id;
    bool on_grid_aux[2];
    for (int k = 0; k < 2; ++k) {
      const uint16_t u = round_group(xval + 8 * k, id, Laux + 8 * k);
      on_grid_aux[k] = grid.index_of(u) >= 0;
      if (!on_grid_aux[k]) iq::best_neighbour(grid, u, xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
    }
    float sumqx, sumq2;
    fit_sums(16, weight, xval, Laux, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, 16);
      on_grid[0] = on_grid_aux[0];
      on_grid[1] = on_grid_aux[1];
    }
  }
  if ((!on_grid[0] || !on_grid[1]) && scale > 0) {
    const float id = 1 / scale;
    for (int k = 0; k < 2; ++k) {
      if (on_grid[k]) continue;
      const uint16_t u = round_group(xval + 8 * k, id, L + 8 * k);
      if (grid.index_of(u) < 0) iq::best_neighbour(grid, u, xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
    }
    float sumqx, sumq2;
    fit_sums(16, weight, xval, L, &sumqx, &sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  if (scale < 0) {
    scale = -scale;
    for (auto& s : r.signs) s = static_cast<uint8_t>(f.even_parity ? (~s & 127) : ~s);
  }
  for (int k = 0; k < 2; ++k) r.index[k] = on_grid_index(grid, L + 8 * k);
  r.scale = scale;
  return r;
}

// Quantizes one super-block; `store` writes sub-block ib's two groups. Returns the largest scale
// (0: d and the scales are 0).
template <typename Store>
float quantize_sub16_block(const Sub16Format& f, const float* xbl, const float* qw, uint16_t* d_out,
                          uint8_t* scale_bytes, Store store) {
  const auto& grid = iq::grid_neighbourhoods(f.grid);
  const float sumx2 = iq::sum_of_squares(xbl, QK_K);
  const float sigma2 = f.sigma2_factor * sumx2 / QK_K;
  float scales[QK_K / 16];
  float max_scale = 0;
  for (int ib = 0; ib < QK_K / 16; ++ib) {
    const Sub16Result r = quantize_sub16(grid, f, xbl + 16 * ib, qw != nullptr ? qw + 16 * ib : nullptr, sigma2);
    scales[ib] = r.scale;
    if (r.zero) continue;
    store(ib, r);
    max_scale = max_scale > r.scale ? max_scale : r.scale;
  }
  *d_out = fp32_to_fp16(0.f);
  std::memset(scale_bytes, 0, QK_K / 32);
  if (max_scale == 0) return 0;
  const float d = max_scale / 31;
  *d_out = fp32_to_fp16(d * f.d_factor);
  const float id = 1 / d;
  for (int ib = 0; ib < QK_K / 16; ++ib) {
    scale_bytes[ib / 2] = static_cast<uint8_t>(scale_bytes[ib / 2] | scale_code(id, scales[ib]) << (4 * (ib % 2)));
  }
  return max_scale;
}

constexpr Sub16Format kIq2xs{iq::SearchGrid::iq2_xs, true, 1.0f, 1e-15f, 1.0f};
constexpr Sub16Format kIq2s{iq::SearchGrid::iq2_s, false, 2.0f, 1e-8f, 0.9875f};

void quantize_iq2_xs(const float* x, void* dst, int64_t n, const float* importance) {
  iq::check_finite_row("IQ2_XS", x, importance, n);
  auto* y = static_cast<block_iq2_xs*>(dst);
  for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
    block_iq2_xs& b = y[ibl];
    uint16_t q2[QK_K / 8] = {};
    const float max_scale = quantize_sub16_block(kIq2xs, x + QK_K * ibl, importance + QK_K * ibl, &b.d, b.scales,
                         [&](int ib, const Sub16Result& r) {
                           for (int k = 0; k < 2; ++k) {
                             q2[2 * ib + k] = static_cast<uint16_t>(r.index[k] | r.signs[k] << 9);
                           }
                         });
    if (max_scale == 0) std::memset(q2, 0, sizeof(q2));  // as ggml: all-zero scales clear the indices
    std::memcpy(b.qs, q2, sizeof(q2));
  }
}

void quantize_iq2_s_rows(const float* x, void* dst, int64_t n, const float* importance) {
  auto* y = static_cast<block_iq2_s*>(dst);
  for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
    block_iq2_s& b = y[ibl];
    std::memset(&b, 0, sizeof(b));
    quantize_sub16_block(kIq2s, x + QK_K * ibl, importance != nullptr ? importance + QK_K * ibl : nullptr, &b.d,
                         b.scales, [&](int ib, const Sub16Result& r) {
                           for (int k = 0; k < 2; ++k) {
                             const int i8 = 2 * ib + k;
                             b.qs[i8] = static_cast<uint8_t>(r.index[k] & 255);
                             b.qh[i8 / 4] = static_cast<uint8_t>(b.qh[i8 / 4] | (r.index[k] >> 8) << (2 * (i8 % 4)));
                             b.qs[QK_K / 8 + i8] = r.signs[k];
                           }
                         });
  }
}

void quantize_iq2_s_weighted(const float* x, void* dst, int64_t n, const float* importance) {
  iq::check_finite_row("IQ2_S", x, importance, n);
  quantize_iq2_s_rows(x, dst, n, importance);
}

void quantize_iq2_s(const float* x, void* dst, int64_t n) {
  iq::check_finite_row("IQ2_S", x, nullptr, n);
  quantize_iq2_s_rows(x, dst, n, nullptr);
}

}  // namespace

void add_iq2_formats(std::vector<Format>& table) {
  Format xxs = reference_format(DType::IQ2_XXS, dequantize_iq2_xxs, nullptr, DType::Q8_K, dot_iq2_xxs_q8_k);
  xxs.quantize_weighted = quantize_iq2_xxs;
  xxs.requires_importance = true;
  table.push_back(xxs);
  Format xs = reference_format(DType::IQ2_XS, dequantize_iq2_xs, nullptr, DType::Q8_K,
                               dot_16_scales_q8_k<block_iq2_xs, iq2_xs_group>);
  xs.quantize_weighted = quantize_iq2_xs;
  xs.requires_importance = true;
  table.push_back(xs);
  Format s = reference_format(DType::IQ2_S, dequantize_iq2_s, quantize_iq2_s, DType::Q8_K,
                              dot_16_scales_q8_k<block_iq2_s, iq2_s_group>);
  s.quantize_weighted = quantize_iq2_s_weighted;
  table.push_back(s);
}

}  // namespace okapi::quant::detail
