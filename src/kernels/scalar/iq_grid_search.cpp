#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no fused multiply-adds below
//
#include "kernels/scalar/iq_grid_search.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cfloat>

#include "core/error.hpp"
#include "kernels/scalar/iq_grids.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::iq {
namespace {

constexpr int kCodes = 43692;  // ggml's kmap_size: every code with levels 0..2, and more
constexpr int kMaxDistance = 8 * 36;

// An IQ2 grid entry (bytes 0x08, 0x19, 0x2b) as the quantizer's code (levels 0, 1, 2).
std::vector<uint16_t> iq2_codes(std::span<const uint64_t> grid) {
  std::vector<uint16_t> codes;
  codes.reserve(grid.size());
  for (const uint64_t point : grid) {
    unsigned code = 0;
    for (int j = 0; j < 8; ++j) {
      const auto byte = static_cast<uint8_t>(point >> (8 * j));
      const unsigned level = byte == 0x08 ? 0U : byte == 0x19 ? 1U : 2U;
      code |= level << (2 * j);
    }
    codes.push_back(static_cast<uint16_t>(code));
  }
  return codes;
}

bool has_level_3(int code) {
  for (int j = 0; j < 8; ++j) {
    if (((code >> (2 * j)) & 3) == 3) return true;
  }
  return false;
}

}  // namespace

GridNeighbourhoods::GridNeighbourhoods(std::span<const uint16_t> grid_codes, int nwant)
    : map_(kCodes, -1), offsets_(kCodes + 1, 0) {
  const int n_grid = static_cast<int>(grid_codes.size());
  points_.resize(grid_codes.size() * 8);
  for (int g = 0; g < n_grid; ++g) {
    for (int j = 0; j < 8; ++j) points_[static_cast<size_t>(g) * 8 + static_cast<size_t>(j)] =
        static_cast<int8_t>(2 * ((grid_codes[static_cast<size_t>(g)] >> (2 * j)) & 3) + 1);
    map_[grid_codes[static_cast<size_t>(g)]] = g;
  }
  // Codes with a level 3 never reach a search (levels are clamped to 0..2): they get no list.
  std::vector<int> dist(static_cast<size_t>(n_grid));
  for (int code = 0; code < kCodes; ++code) {
    offsets_[static_cast<size_t>(code)] = static_cast<uint32_t>(lists_.size());
    if (map_[static_cast<size_t>(code)] >= 0 || has_level_3(code)) continue;
    int pos[8];
    for (int j = 0; j < 8; ++j) pos[j] = 2 * ((code >> (2 * j)) & 3) + 1;
    std::array<bool, kMaxDistance + 1> present{};
    for (int g = 0; g < n_grid; ++g) {
      const int8_t* p = point(g);
      int d2 = 0;
      for (int j = 0; j < 8; ++j) d2 += (p[j] - pos[j]) * (p[j] - pos[j]);
      dist[static_cast<size_t>(g)] = d2;
      present[static_cast<size_t>(d2)] = true;
    }
    // The nwant smallest distances present, each one's points in index order.
    int taken = 0;
    for (int d = 0; d <= kMaxDistance && taken < nwant; ++d) {
      if (!present[static_cast<size_t>(d)]) continue;
      ++taken;
      for (int g = 0; g < n_grid; ++g) {
        if (dist[static_cast<size_t>(g)] == d) lists_.push_back(static_cast<uint16_t>(g));
      }
    }
  }
  offsets_[kCodes] = static_cast<uint32_t>(lists_.size());
}

std::span<const uint16_t> GridNeighbourhoods::neighbours(uint16_t u) const {
  if (u >= kCodes) return {};
  return std::span<const uint16_t>(lists_).subspan(offsets_[u], offsets_[u + 1U] - offsets_[u]);
}

const GridNeighbourhoods& grid_neighbourhoods(SearchGrid grid) {
  switch (grid) {
    case SearchGrid::iq2_xxs: {
      static const GridNeighbourhoods g(iq2_codes(kIq2xxsGrid), 2);
      return g;
    }
    case SearchGrid::iq2_xs: {
      static const GridNeighbourhoods g(iq2_codes(kIq2xsGrid), 2);
      return g;
    }
    case SearchGrid::iq2_s: {
      static const GridNeighbourhoods g(iq2_codes(kIq2sGrid), 1);
      return g;
    }
    case SearchGrid::iq1: {
      static const GridNeighbourhoods g(kIq1sSearchGrid, 3);
      return g;
    }
  }
  throw_error("unknown IQ search grid");
}

int best_neighbour(const GridNeighbourhoods& grid, uint16_t u, const float* xval, const float* weight, float scale,
                   int8_t* L) {
  float best_d2 = FLT_MAX;
  int best = -1;
  for (const uint16_t g : grid.neighbours(u)) {
    const int8_t* p = grid.point(g);
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float diff = scale * static_cast<float>(p[i]) - xval[i];
      d2 += weight[i] * diff * diff;
    }
    if (d2 < best_d2) {
      best_d2 = d2;
      best = g;
    }
  }
  if (best < 0) throw_error("IQ quantizer: no grid point fits a group (non-finite values or weights)");
  const int8_t* p = grid.point(best);
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((p[i] - 1) / 2);
  return best;
}

float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* weights) {
  // Operation for operation ggml's, including what it does with a negative x (IQ2_XXS passes one
  // sign-flipped value): levels are not clamped below 0 and a negative level wraps modulo 256 in
  // L, which the later sums then read back as stored.
  using kquant::nearest_int;
  const auto wrap = [](int l) { return static_cast<uint8_t>(l); };
  float max = 0;
  for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
  if (max < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = wrap(nearest_int(iscale * x[i]));
  const float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += weights[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += weights[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = wrap(l);
    const float w = weights[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = weights[i];
      const auto li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
        if (new_l != static_cast<int>(L[i])) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = wrap(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float sum_of_squares(const float* x, int n) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

void check_finite_row(const char* type_name, const float* x, const float* importance, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) throw_error("cannot quantize to {}: element {} of the row is {}", type_name, i, x[i]);
    if (importance != nullptr && !std::isfinite(importance[i])) {
      throw_error("cannot quantize to {}: importance weight {} is {}", type_name, i, importance[i]);
    }
  }
}

}  // namespace okapi::quant::iq
