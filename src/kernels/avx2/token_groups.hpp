// The loop shared by the multi-token GEMM tiles of gemm_legacy.cpp and gemm_kquant_low.cpp:
// token groups of up to 4 outside, weight rows inside, so a group's activations stay in L1/L2
// while every row of the tile meets them, and each weight row is read once per group.
// Include only from files under an avx2/ folder (the row functions it instantiates are AVX2).
#pragma once
#include <cstddef>
#include <cstdint>

namespace okapi::kernels::avx2 {

// Dot<G>::run(n_blocks, const Block* row, const uint8_t* a, size_t a_row, float* out) writes the
// dots of one weight row with G activation rows (a_row bytes apart) to out[0..G).
// y[t * y_stride + r] = scale * dot(weight row r, activation row t).
template <typename Block, int kBlockSize, template <int> class Dot>
void tile_by_token_groups(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                          int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  const int64_t n_blocks = n / kBlockSize;
  for (int64_t t = 0; t < n_tokens; t += 4) {
    const int64_t g = n_tokens - t < 4 ? n_tokens - t : 4;
    const uint8_t* a_t = a + static_cast<size_t>(t) * a_row;
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* w_r = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_row);
      float out[4];
      switch (g) {
        case 4: Dot<4>::run(n_blocks, w_r, a_t, a_row, out); break;
        case 3: Dot<3>::run(n_blocks, w_r, a_t, a_row, out); break;
        case 2: Dot<2>::run(n_blocks, w_r, a_t, a_row, out); break;
        default: Dot<1>::run(n_blocks, w_r, a_t, a_row, out); break;
      }
      for (int64_t j = 0; j < g; ++j) y[(t + j) * y_stride + r] = out[j] * scale;
    }
  }
}

}  // namespace okapi::kernels::avx2
