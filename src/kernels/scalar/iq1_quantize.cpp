#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no fused multiply-adds below
//
// IQ1_S, IQ1_M: ggml's quantizers, operation for operation. Groups of 32 (IQ1_S) or 16 (IQ1_M)
// values take levels -1, 0, 1 shifted by +-delta (0.125); the best split of the sorted values into
// the three levels is found exhaustively, then each group of 8 is moved onto the 2048-point grid
// (iq_grid_search) and the scale refitted. Both need an importance matrix, as in ggml.
//
// IQ1_S block (50 bytes): fp16 d, qs[32] (low 8 bits of the grid indices), qh[8] uint16: per 32
// values 4 x 3 high index bits, a 3-bit scale at bit 12 and the delta sign at bit 15.
// IQ1_M block (56 bytes): qs[32], qh[16] (per 16 values: 3 high bits of each of the two indices
// and each group's delta sign at bits 3 and 7), scales[8] (as 4 uint16: 3-bit scales, and the
// fp16 super-block scale in the top nibbles).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq1_quantize.hpp"
#include "kernels/scalar/iq_grid_search.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::detail {
namespace {

using kquant::nearest_int;

struct iq1_s_block { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };
struct iq1_m_block { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };
static_assert(sizeof(iq1_s_block) == 50 && sizeof(iq1_m_block) == 56);

constexpr float kDelta = 0.125f;  // IQ1S_DELTA, IQ1M_DELTA
constexpr float kPlus[3] = {-1 + kDelta, kDelta, 1 + kDelta};
constexpr float kMinus[3] = {-1 - kDelta, -kDelta, 1 - kDelta};

// ggml's iq1_find_best_neighbour2: the neighbour of code u minimising sum w (scale * xg[l] - x)^2.
int best_neighbour_iq1(const iq::GridNeighbourhoods& grid, uint16_t u, const float* x, const float* weight,
                       float scale, const float* xg, int8_t* L) {
  float best = FLT_MAX;
  int best_index = -1;
  const auto score = [&](int g) {
    const int8_t* p = grid.point(g);
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float diff = scale * xg[(p[i] - 1) / 2] - x[i];
      d2 += weight[i] * diff * diff;
    }
    return d2;
  };
  for (const uint16_t g : grid.neighbours(u)) {
    const float d2 = score(g);
    if (d2 < best) {
      best = d2;
      best_index = g;
    }
  }
  // (ggml then scans the whole grid, reading x out of bounds; only non-finite sums get here.)
  if (best_index < 0) throw_error("IQ1 quantizer: no grid point fits a group (values too large)");
  const int8_t* p = grid.point(best_index);
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((p[i] - 1) / 2);
  return best_index;
}

float abs_max(const float* x, int n) {
  float max = std::fabs(x[0]);
  for (int i = 1; i < n; ++i) max = max > std::fabs(x[i]) ? max : std::fabs(x[i]);
  return max;
}

// Indices of x[0..n) by ascending value, equal values in index order (glibc's qsort, a merge sort,
// keeps them so for ggml).
template <int N>
void sort_indices(const float* x, int* idx) {
  for (int j = 0; j < N; ++j) idx[j] = j;
  std::stable_sort(idx, idx + N, [x](int a, int b) { return x[a] < x[b]; });
}

int clamp_level(int l, int hi) { return l < 0 ? 0 : (l > hi ? hi : l); }

// Moves the groups of 8 in L onto the grid (index[k]); returns whether all were on it.
bool to_grid(const iq::GridNeighbourhoods& grid, int n_groups, const float* xb, const float* weight, float scale,
             const float* const* xx, int8_t* L, uint16_t* index) {
  bool all_on_grid = true;
  for (int k = 0; k < n_groups; ++k) {
    unsigned u = 0;
    for (int j = 0; j < 8; ++j) u |= static_cast<unsigned>(L[8 * k + j]) << (2 * j);
    int g = grid.index_of(static_cast<uint16_t>(u));
    if (g < 0) {
      all_on_grid = false;
      g = best_neighbour_iq1(grid, static_cast<uint16_t>(u), xb + 8 * k, weight + 8 * k, scale, xx[k], L + 8 * k);
    }
    index[k] = static_cast<uint16_t>(g);
  }
  return all_on_grid;
}

// The least-squares scale of the groups at their grid points (kept when both sums are positive).
float refit(const iq::GridNeighbourhoods& grid, int n_groups, const float* xb, const float* weight,
            const float* const* xx, const uint16_t* index, float scale) {
  float sumqx = 0, sumq2 = 0;
  for (int k = 0; k < n_groups; ++k) {
    const int8_t* p = grid.point(index[k]);
    for (int j = 0; j < 8; ++j) {
      const float w = weight[8 * k + j];
      const float q = xx[k][(p[j] - 1) / 2];
      sumqx += w * q * xb[8 * k + j];
      sumq2 += w * q * q;
    }
  }
  return sumqx > 0 && sumq2 > 0 ? sumqx / sumq2 : scale;
}

void check_row(const char* name, const float* x, const float* importance, int64_t n) {
  if (importance == nullptr) throw_error("{} needs an importance matrix", name);
  iq::check_finite_row(name, x, importance, n);
}

}  // namespace

void quantize_iq1_s_row(const float* x, void* dst, int64_t n, const float* importance) {
  check_row("IQ1_S", x, importance, n);
  constexpr int kBs = 32;
  const auto& grid = iq::grid_neighbourhoods(iq::SearchGrid::iq1);
  auto* y = static_cast<iq1_s_block*>(dst);
  for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
    iq1_s_block& b = y[ibl];
    b.d = fp32_to_fp16(0.f);
    std::memset(b.qs, 0, sizeof(b.qs));
    std::memset(b.qh, 0, sizeof(b.qh));
    const float* xbl = x + QK_K * ibl;
    const float sumx2 = iq::sum_of_squares(xbl, QK_K);
    const float sigma2 = 2 * sumx2 / QK_K;
    float scales[QK_K / kBs];
    int shifts[QK_K / kBs];
    float max_scale = 0;
    for (int ib = 0; ib < QK_K / kBs; ++ib) {
      const float* xb = xbl + kBs * ib;
      const float* qw = importance + QK_K * ibl + kBs * ib;
      float weight[kBs];
      for (int i = 0; i < kBs; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      scales[ib] = 0;
      shifts[ib] = 1;
      const float max = abs_max(xb, kBs);
      if (max < 1e-12f) continue;
      int idx[kBs];
      sort_indices<kBs>(xb, idx);
      float sumx[kBs + 1], sumw[kBs + 1];
      sumx[0] = sumw[0] = 0;
      for (int j = 0; j < kBs; ++j) {
        const int i = idx[j];
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
      }
      float best_score = -FLT_MAX, scale = max;
      int besti1 = -1, besti2 = -1, best_shift = 0;
      for (int i1 = 0; i1 <= kBs; ++i1) {
        for (int i2 = i1; i2 <= kBs; ++i2) {
          for (const int shift : {1, -1}) {
            const float* v = shift == 1 ? kPlus : kMinus;
            const float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[kBs] - sumx[i2]) * v[2];
            const float sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                                (sumw[kBs] - sumw[i2]) * v[2] * v[2];
            if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
              scale = sumqx / sumq2;
              best_score = scale * sumqx;
              besti1 = i1;
              besti2 = i2;
              best_shift = shift;
            }
          }
        }
      }
      if (besti1 < 0 || besti2 < 0 || best_shift == 0) continue;
      int8_t L[kBs];
      for (int j = 0; j < kBs; ++j) L[idx[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
      if (scale < 0) {
        for (auto& l : L) l = static_cast<int8_t>(2 - l);
        scale = -scale;
        best_shift = -best_shift;
      }
      const float* v = best_shift == 1 ? kPlus : kMinus;
      const float* const xx[4] = {v, v, v, v};
      uint16_t index[kBs / 8];
      if (!to_grid(grid, kBs / 8, xb, weight, scale, xx, L, index)) scale = refit(grid, kBs / 8, xb, weight, xx, index, scale);
      unsigned h = 0;
      for (int k = 0; k < kBs / 8; ++k) {
        b.qs[(kBs / 8) * ib + k] = static_cast<uint8_t>(index[k] & 255);
        h |= static_cast<unsigned>(index[k] >> 8) << (3 * k);
      }
      b.qh[ib] = static_cast<uint16_t>(h);
      scales[ib] = scale;
      shifts[ib] = best_shift;
      max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale == 0) continue;
    const float d = max_scale / 15;
    b.d = fp32_to_fp16(d * 1.125f);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / kBs; ++ib) {
      int l = clamp_level(nearest_int(0.5f * (id * scales[ib] - 1)), 7);
      if (shifts[ib] == -1) l |= 8;
      b.qh[ib] = static_cast<uint16_t>(b.qh[ib] | l << 12);
    }
  }
}

void quantize_iq1_m_row(const float* x, void* dst, int64_t n, const float* importance) {
  check_row("IQ1_M", x, importance, n);
  constexpr int kBs = 16;
  constexpr uint8_t kMasks[4] = {0x00, 0x80, 0x08, 0x88};
  const auto& grid = iq::grid_neighbourhoods(iq::SearchGrid::iq1);
  auto* y = static_cast<iq1_m_block*>(dst);
  // Shift k: bit 1 picks the first group's delta sign, bit 0 the second's (0: plus).
  const auto values = [](int k, int group) { return (group == 0 ? k < 2 : k % 2 == 0) ? kPlus : kMinus; };
  for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
    iq1_m_block& b = y[ibl];
    std::memset(&b, 0, sizeof(b));
    const float* xbl = x + QK_K * ibl;
    const float sumx2 = iq::sum_of_squares(xbl, QK_K);
    const float sigma2 = 2 * sumx2 / QK_K;
    float scales[QK_K / kBs];
    int shifts[QK_K / kBs];
    float max_scale = 0;
    const auto weights_of = [&](int ib, float* weight) {
      const float* xb = xbl + kBs * ib;
      const float* qw = importance + QK_K * ibl + kBs * ib;
      for (int i = 0; i < kBs; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    };
    for (int ib = 0; ib < QK_K / kBs; ++ib) {
      const float* xb = xbl + kBs * ib;
      float weight[kBs];
      weights_of(ib, weight);
      scales[ib] = 0;
      shifts[ib] = 0;
      const float max = abs_max(xb, kBs);
      if (max < 1e-7f) continue;
      int idx[kBs];
      sort_indices<kBs>(xb, idx);
      float best_score = -FLT_MAX, scale = max;
      int besti1 = -1, besti2 = -1, best_k = -1;
      // Prefix sums per half of the block (each half has its own delta sign).
      float px[2][kBs + 1], pw[2][kBs + 1];
      px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
      for (int j = 0; j < kBs; ++j) {
        const int i = idx[j];
        const int h = i < kBs / 2 ? 0 : 1;
        px[h][j + 1] = px[h][j] + weight[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + weight[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
      }
      const float txs[2] = {px[0][kBs], px[1][kBs]};
      const float tws[2] = {pw[0][kBs], pw[1][kBs]};
      const float p2 = kPlus[2], m2 = kMinus[2];
      const float cp1 = kPlus[0] * kPlus[0] - kPlus[1] * kPlus[1];
      const float cp2 = kPlus[1] * kPlus[1] - kPlus[2] * kPlus[2];
      const float cm1 = kMinus[0] * kMinus[0] - kMinus[1] * kMinus[1];
      const float cm2 = kMinus[1] * kMinus[1] - kMinus[2] * kMinus[2];
      for (int i1 = 0; i1 <= kBs; ++i1) {
        for (int i2 = i1; i2 <= kBs; ++i2) {
          float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
          for (int h = 0; h < 2; ++h) {
            const float sx = px[h][i1] + px[h][i2];
            qx_p[h] = txs[h] * p2 - sx;
            qx_m[h] = txs[h] * m2 - sx;
            q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
            q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
          }
          const float sumqx[4] = {qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]};
          const float sumq2[4] = {q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]};
          for (int k = 0; k < 4; ++k) {
            if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
              scale = sumqx[k] / sumq2[k];
              best_score = scale * sumqx[k];
              besti1 = i1;
              besti2 = i2;
              best_k = k;
            }
          }
        }
      }
      if (besti1 < 0 || besti2 < 0 || best_k < 0) continue;
      int8_t L[kBs];
      for (int j = 0; j < kBs; ++j) L[idx[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
      if (scale < 0) {
        for (auto& l : L) l = static_cast<int8_t>(2 - l);
        scale = -scale;
        best_k = 3 - best_k;
      }
      const float* const xx[2] = {values(best_k, 0), values(best_k, 1)};
      uint16_t index[2];
      if (!to_grid(grid, 2, xb, weight, scale, xx, L, index)) scale = refit(grid, 2, xb, weight, xx, index, scale);
      b.qs[2 * ib] = static_cast<uint8_t>(index[0] & 255);
      b.qs[2 * ib + 1] = static_cast<uint8_t>(index[1] & 255);
      b.qh[ib] = static_cast<uint8_t>((index[0] >> 8) | ((index[1] >> 8) << 4));
      scales[ib] = scale;
      shifts[ib] = best_k;
      max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale == 0) continue;
    uint16_t sc[4] = {0, 0, 0, 0};
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < QK_K / kBs; ++ib) {
      const int l = clamp_level(nearest_int(0.5f * (id * scales[ib] - 1)), 7);
      sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | l << (3 * (ib % 4)));
      b.qh[ib] = static_cast<uint8_t>(b.qh[ib] | kMasks[shifts[ib]]);
      const float* xb = xbl + kBs * ib;
      float weight[kBs];
      weights_of(ib, weight);
      for (int k = 0; k < 2; ++k) {
        const float* xx = values(shifts[ib], k);
        const int g = b.qs[2 * ib + k] | ((b.qh[ib] << (8 - 4 * k)) & 0x700);
        const int8_t* p = grid.point(g);
        for (int j = 0; j < 8; ++j) {
          const float w = weight[8 * k + j];
          const float q = xx[(p[j] - 1) / 2] * static_cast<float>(2 * l + 1);
          sumqx += w * q * xb[8 * k + j];
          sumq2 += w * q * q;
        }
      }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t s = fp32_to_fp16(d * 1.1125f);
    sc[0] = static_cast<uint16_t>(sc[0] | (s & 0x000f) << 12);
    sc[1] = static_cast<uint16_t>(sc[1] | (s & 0x00f0) << 8);
    sc[2] = static_cast<uint16_t>(sc[2] | (s & 0x0f00) << 4);
    sc[3] = static_cast<uint16_t>(sc[3] | (s & 0xf000));
    std::memcpy(b.scales, sc, sizeof(sc));
  }
}

void add_iq1_quantizers(std::vector<Format>& table) {
  for (auto& f : table) {
    if (f.type == DType::IQ1_S) {
      f.quantize_weighted = quantize_iq1_s_row;
      f.requires_importance = true;
    } else if (f.type == DType::IQ1_M) {
      f.quantize_weighted = quantize_iq1_m_row;
      f.requires_importance = true;
    }
  }
}

}  // namespace okapi::quant::detail
