// The grid search shared by ggml's codebook quantizers IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M
// (ggml-quants.c iq2xs_init_impl, iq2_find_best_neighbour, make_qp_quants).
//
// A group of 8 values is first rounded to levels l_j in 0..2 and written as the 16-bit code
// u = sum l_j << 2j. When u is a grid point the group takes it; otherwise the quantizer picks among
// u's neighbours: the grid points whose squared distance to u (in coordinates 2l + 1) is one of the
// `nwant` smallest distances present (nwant = 2 for IQ2_XXS / IQ2_XS, 1 for IQ2_S, 3 for IQ1),
// nearest first, equal distances by grid index, as ggml's sorted lists are.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace okapi::quant::iq {

enum class SearchGrid { iq2_xxs, iq2_xs, iq2_s, iq1 };

class GridNeighbourhoods {
 public:
  GridNeighbourhoods(std::span<const uint16_t> grid_codes, int nwant);

  // The grid point index of code u (levels 0..2 at bits 2j), or -1 when u is not on the grid.
  int index_of(uint16_t u) const { return map_[u]; }
  // u's neighbours (grid indices, nearest first); empty only for codes with a level 3.
  std::span<const uint16_t> neighbours(uint16_t u) const;
  // Grid point `index`: its 8 coordinates 2l + 1 (1, 3 or 5).
  const int8_t* point(int index) const { return &points_[static_cast<size_t>(index) * 8]; }
  int size() const { return static_cast<int>(points_.size() / 8); }

 private:
  std::vector<int8_t> points_;       // 8 coordinates per grid point
  std::vector<int32_t> map_;         // per code: grid index, or -1
  std::vector<uint32_t> offsets_;    // per code: start of its neighbour list in lists_ (n + 1 entries)
  std::vector<uint16_t> lists_;
};

// The neighbourhoods of one grid, built on first use (thread-safe).
const GridNeighbourhoods& grid_neighbourhoods(SearchGrid grid);

// ggml's iq2_find_best_neighbour: among u's neighbours, the point minimising
// sum weight_i (scale * point_i - xval_i)^2 (the first of equal ones); L receives its levels.
// Returns its index. Throws okapi::Error when none compares (non-finite inputs).
int best_neighbour(const GridNeighbourhoods& grid, uint16_t u, const float* xval, const float* weight, float scale,
                   int8_t* L);

// ggml's make_qp_quants: levels L_i in 0..nmax for non-negative x with weights, returns the scale.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* weights);

// sum x_i^2 over a super-block in order (the quantizers' sigma2 = factor * this / 256).
float sum_of_squares(const float* x, int n);

// Throws okapi::Error when a row to quantize, or its importance weights, hold a non-finite value
// (ggml aborts on them in these quantizers).
void check_finite_row(const char* type_name, const float* x, const float* importance, int64_t n);

}  // namespace okapi::quant::iq
