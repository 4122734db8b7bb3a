// IQ3_XXS / IQ3_S quantizers, operation by operation as ggml's quantize_row_iq3_xxs_impl and
// quantize_row_iq3_s_impl (ggml-quants.c) so that the bytes are identical, with and without
// importance weights. Per group of 32 values: take the signs off (IQ3_XXS keeps an even number of
// them by flipping the least important value), then try 31 (XXS) or 19 (S) scales; at each, round
// every 4 values to levels 0..7 and, where those 4 levels are not a grid point, take the nearest of
// the point's precomputed grid neighbours (iq3xs_init_impl's table); keep the scale of the best
// weighted fit, re-round the groups that were off the grid at it, and refit. The group scales are
// then coded in 4 bits under one fp16 d per 256 values.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no float contraction below

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/scalar/iq3_grids.hpp"
#include "kernels/scalar/iq3_quantize.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::iq3 {
namespace {

constexpr int kMaxQ = 8;        // levels 0..7, value 2l + 1
constexpr int kMapSize = 4096;  // 4 levels of 3 bits
constexpr int kGroup = 32;

// A grid as the quantizer sees it (ggml's iq3_data[]): each point's 4 values 2l + 1 (int8 bytes),
// the map from a 12-bit level code to the point (>= 0) or to its neighbour list (-(offset + 1)),
// and the lists: a count, then that many point indices, nearest first.
struct Neighbourhood {
  std::vector<uint32_t> grid;
  std::array<int, kMapSize> map{};
  std::vector<uint16_t> neighbours;

  int value(int point, int i) const { return static_cast<int8_t>((grid[static_cast<size_t>(point)] >> (8 * i)) & 0xff); }
  const uint16_t* neighbours_of(int code) const { return neighbours.data() + (-map[static_cast<size_t>(code)] - 1); }
};

// ggml's iq3xs_init_impl: for every 12-bit code off the grid, the grid points at the nearest
// (256: 2, 512: 3) distinct squared distances, in (distance, index) order.
Neighbourhood make_neighbourhood(int grid_size) {
  Neighbourhood nb;
  const int nwant = grid_size == 256 ? 2 : 3;
  nb.grid.resize(static_cast<size_t>(grid_size));
  nb.map.fill(-1);
  for (int k = 0; k < grid_size; ++k) {
    const uint32_t point = grid_size == 256 ? kXxsGrid[k] : kSGrid[k];
    uint32_t values = 0;
    int code = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t byte = (point >> (8 * i)) & 0xff;
      const int l = grid_size == 256 ? static_cast<int>(byte >> 3) : static_cast<int>(byte - 1) / 2;
      values |= static_cast<uint32_t>(2 * l + 1) << (8 * i);
      code |= l << (3 * i);
    }
    nb.grid[static_cast<size_t>(k)] = values;
    nb.map[static_cast<size_t>(code)] = k;
  }
  std::vector<std::pair<int, int>> dist2(static_cast<size_t>(grid_size));
  for (int code = 0; code < kMapSize; ++code) {
    if (nb.map[static_cast<size_t>(code)] >= 0) continue;
    for (int j = 0; j < grid_size; ++j) {
      int d2 = 0;
      for (int k = 0; k < 4; ++k) {
        const int diff = nb.value(j, k) - (2 * ((code >> (3 * k)) & 7) + 1);
        d2 += diff * diff;
      }
      dist2[static_cast<size_t>(j)] = {d2, j};
    }
    std::sort(dist2.begin(), dist2.end());
    const size_t start = nb.neighbours.size();
    nb.map[static_cast<size_t>(code)] = -static_cast<int>(start) - 1;
    nb.neighbours.push_back(0);
    int d2 = dist2[0].first, nhave = 1;
    for (const auto& [dj, j] : dist2) {
      if (dj > d2) {
        if (nhave == nwant) break;
        d2 = dj;
        ++nhave;
      }
      nb.neighbours.push_back(static_cast<uint16_t>(j));
    }
    nb.neighbours[start] = static_cast<uint16_t>(nb.neighbours.size() - start - 1);
  }
  return nb;
}

// Each grid's table is built once, on first use, thread-safely (a function-local static).
const Neighbourhood& neighbourhood(int grid_size) {
  if (grid_size == 256) {
    static const Neighbourhood n256 = make_neighbourhood(256);
    return n256;
  }
  static const Neighbourhood n512 = make_neighbourhood(512);
  return n512;
}

// ggml's iq3_find_best_neighbour: the neighbour with the least weighted squared error at `scale`;
// its levels go to L. (Where every error is NaN or huge, ggml aborts; the first neighbour is taken.)
int best_neighbour(const Neighbourhood& nb, int code, const float* xval, const float* weight, float scale, int8_t* L) {
  const uint16_t* list = nb.neighbours_of(code);
  float best_d2 = FLT_MAX;
  int best = list[1];
  for (int j = 1; j <= list[0]; ++j) {
    float d2 = 0;
    for (int i = 0; i < 4; ++i) {
      const float q = static_cast<float>(nb.value(list[j], i));
      const float diff = scale * q - xval[i];
      d2 += weight[i] * diff * diff;
    }
    if (d2 < best_d2) {
      best_d2 = d2;
      best = list[j];
    }
  }
  for (int i = 0; i < 4; ++i) L[i] = static_cast<int8_t>((nb.value(best, i) - 1) / 2);
  return best;
}

int level_code(const int8_t* L) {
  int code = 0;
  for (int i = 0; i < 4; ++i) code |= L[i] << (3 * i);
  return code;
}

// The grid point of 4 levels that the search left on the grid (always: they come from the map or
// from a neighbour list).
int point_of(const Neighbourhood& nb, const int8_t* L) {
  const int point = nb.map[static_cast<size_t>(level_code(L))];
  return point >= 0 ? point : 0;
}

inline int level(float id, float x) { return std::clamp(kquant::nearest_int(0.5f * (id * x - 1)), 0, kMaxQ - 1); }

// One group of 32 values with its weights: the levels L (grid points of 4), the sign bytes and the
// scale. Returns false for a group ggml skips as all zero (its scale is 0 and nothing is stored).
bool quantize_group(const Neighbourhood& nb, bool xxs, const float* xb, const float* weight, int8_t* L,
                    uint8_t* signs, float* scale_out) {
  float waux[kGroup], xval[kGroup];
  int8_t Laux[kGroup];
  bool on_grid[8], on_grid_aux[8];
  for (int i = 0; i < kGroup; ++i) waux[i] = std::sqrt(weight[i]);
  for (int k = 0; k < 4; ++k) {
    int nflip = 0;
    unsigned s = 0;
    for (int i = 0; i < 8; ++i) {
      if (xb[8 * k + i] >= 0) {
        xval[8 * k + i] = xb[8 * k + i];
      } else {
        xval[8 * k + i] = -xb[8 * k + i];
        ++nflip;
        s |= 1u << i;
      }
    }
    if (xxs && nflip % 2) {
      // IQ3_XXS stores 7 signs: flip the value of least weighted magnitude to make the count even.
      int imin = 0;
      float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
      for (int i = 1; i < 8; ++i) {
        const float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
        if (ax < min) {
          min = ax;
          imin = i;
        }
      }
      xval[8 * k + imin] = -xval[8 * k + imin];
      s ^= 1u << imin;
    }
    signs[k] = static_cast<uint8_t>(xxs ? s & 127 : s);
  }
  float max = xval[0];
  for (int i = 1; i < kGroup; ++i) max = max > xval[i] ? max : xval[i];
  std::memset(L, 0, kGroup);
  if (xxs ? max < 1e-8f : max == 0) {
    *scale_out = 0;
    return false;
  }
  float best = 0;
  float scale = max / (2 * kMaxQ - 1);
  for (bool& b : on_grid) b = xxs;
  const int range = xxs ? 15 : 9;
  for (int is = -range; is <= range; ++is) {
    const float id = (2 * kMaxQ - 1 + static_cast<float>(is) * 0.2f) / max;
    const float this_scale = 1 / id;
    for (int k = 0; k < 8; ++k) {
      for (int i = 0; i < 4; ++i) Laux[4 * k + i] = static_cast<int8_t>(level(id, xval[4 * k + i]));
      const int code = level_code(Laux + 4 * k);
      on_grid_aux[k] = nb.map[static_cast<size_t>(code)] >= 0;
      if (!on_grid_aux[k]) best_neighbour(nb, code, xval + 4 * k, waux + 4 * k, this_scale, Laux + 4 * k);
    }
    float sumqx = 0, sumq2 = 0;
    for (int i = 0; i < kGroup; ++i) {
      const float w = weight[i];
      const auto q = static_cast<float>(2 * Laux[i] + 1);
      sumqx += w * xval[i] * q;
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, kGroup);
      std::copy(on_grid_aux, on_grid_aux + 8, on_grid);
    }
  }
  const bool any_off_grid = std::find(on_grid, on_grid + 8, false) != on_grid + 8;
  if (any_off_grid && scale > 0) {
    // Re-round at the chosen scale (IQ3_XXS only the groups that were off the grid, IQ3_S all).
    const float id = 1 / scale;
    for (int k = 0; k < 8; ++k) {
      if (xxs && on_grid[k]) continue;
      int8_t l4[4];
      for (int i = 0; i < 4; ++i) l4[i] = static_cast<int8_t>(level(id, xval[4 * k + i]));
      const int code = level_code(l4);
      int point = nb.map[static_cast<size_t>(code)];
      if (point < 0) point = best_neighbour(nb, code, xval + 4 * k, waux + 4 * k, scale, L + 4 * k);
      for (int i = 0; i < 4; ++i) L[4 * k + i] = static_cast<int8_t>((nb.value(point, i) - 1) / 2);
    }
    float sumqx = 0, sumq2 = 0;
    for (int i = 0; i < kGroup; ++i) {
      const float w = weight[i];
      const auto q = static_cast<float>(2 * L[i] + 1);
      sumqx += w * xval[i] * q;
      sumq2 += w * q * q;
    }
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  if (scale < 0) {  // cannot happen (ggml: "just in case"): flip the scale and the signs
    scale = -scale;
    for (int k = 0; k < 4; ++k) signs[k] = static_cast<uint8_t>(xxs ? ~signs[k] & 127 : ~signs[k]);
  }
  *scale_out = scale;
  return true;
}

// The weights of group ib of a super-block: importance * sqrt(sigma2 + x^2), or x^2 without.
void group_weights(const float* xbl, const float* importance, int ib, float sigma2, float* weight) {
  const float* xb = xbl + kGroup * ib;
  for (int i = 0; i < kGroup; ++i) {
    weight[i] = importance ? importance[kGroup * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
  }
}

float super_block_sigma2(const float* xbl) {
  float sumx2 = 0;
  for (int i = 0; i < QK_K; ++i) sumx2 += xbl[i] * xbl[i];
  return 2 * sumx2 / QK_K;
}

// The 4-bit code of a group scale under d = max_scale / 31.
int scale_code(float id, float scale) { return std::clamp(kquant::nearest_int(0.5f * (id * scale - 1)), 0, 15); }

void quantize_row_xxs(const float* x, void* dst, int64_t n, const float* importance) {
  const Neighbourhood& nb = neighbourhood(256);
  auto* y = static_cast<block_iq3_xxs*>(dst);
  for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
    const float* xbl = x + QK_K * ibl;
    const float* qw = importance ? importance + QK_K * ibl : nullptr;
    block_iq3_xxs& out = y[ibl];
    std::memset(&out, 0, sizeof(out));
    uint32_t words[QK_K / kGroup] = {};
    float scales[QK_K / kGroup];
    float max_scale = 0;
    const float sigma2 = super_block_sigma2(xbl);
    for (int ib = 0; ib < QK_K / kGroup; ++ib) {
      float weight[kGroup];
      int8_t L[kGroup];
      uint8_t signs[4];
      group_weights(xbl, qw, ib, sigma2, weight);
      if (!quantize_group(nb, true, xbl + kGroup * ib, weight, L, signs, &scales[ib])) continue;
      for (int k = 0; k < 8; ++k) out.qs[8 * ib + k] = static_cast<uint8_t>(point_of(nb, L + 4 * k));
      words[ib] = signs[0] | signs[1] << 7 | signs[2] << 14 | static_cast<uint32_t>(signs[3]) << 21;
      max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
    }
    if (max_scale == 0.0f) {
      std::memset(&out, 0, sizeof(out));
      continue;
    }
    const float d = max_scale / 31;
    out.d = fp32_to_fp16(d * 1.0125f);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / kGroup; ++ib) words[ib] |= static_cast<uint32_t>(scale_code(id, scales[ib])) << 28;
    std::memcpy(out.qs + QK_K / 4, words, sizeof(words));
  }
}

void quantize_row_s(const float* x, void* dst, int64_t n, const float* importance) {
  const Neighbourhood& nb = neighbourhood(512);
  auto* y = static_cast<block_iq3_s*>(dst);
  for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
    const float* xbl = x + QK_K * ibl;
    const float* qw = importance ? importance + QK_K * ibl : nullptr;
    block_iq3_s& out = y[ibl];
    std::memset(&out, 0, sizeof(out));
    float scales[QK_K / kGroup];
    float max_scale = 0;
    const float sigma2 = super_block_sigma2(xbl);
    // As ggml, a skipped (all-zero) group does not advance the index and sign cursors: the later
    // groups' bytes move up into its place (ggml's bytes, kept for identical files).
    int slot = 0;
    for (int ib = 0; ib < QK_K / kGroup; ++ib) {
      float weight[kGroup];
      int8_t L[kGroup];
      uint8_t signs[4];
      group_weights(xbl, qw, ib, sigma2, weight);
      if (!quantize_group(nb, false, xbl + kGroup * ib, weight, L, signs, &scales[ib])) continue;
      for (int k = 0; k < 8; ++k) {
        const int point = point_of(nb, L + 4 * k);
        out.qs[8 * slot + k] = static_cast<uint8_t>(point & 255);
        out.qh[ib] = static_cast<uint8_t>(out.qh[ib] | (point >> 8) << k);
      }
      std::memcpy(out.signs + 4 * slot, signs, 4);
      ++slot;
      max_scale = max_scale > scales[ib] ? max_scale : scales[ib];
    }
    if (max_scale == 0.0f) continue;
    const float d = max_scale / 31;
    out.d = fp32_to_fp16(d * 1.033f);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / kGroup; ib += 2) {
      out.scales[ib / 2] = static_cast<uint8_t>(scale_code(id, scales[ib]) | scale_code(id, scales[ib + 1]) << 4);
    }
  }
}

}  // namespace

void quantize_xxs(const float* x, void* dst, int64_t n) { quantize_row_xxs(x, dst, n, nullptr); }
void quantize_xxs_weighted(const float* x, void* dst, int64_t n, const float* importance) {
  quantize_row_xxs(x, dst, n, importance);
}
void quantize_s(const float* x, void* dst, int64_t n) { quantize_row_s(x, dst, n, nullptr); }
void quantize_s_weighted(const float* x, void* dst, int64_t n, const float* importance) {
  quantize_row_s(x, dst, n, importance);
}

}  // namespace okapi::quant::iq3
