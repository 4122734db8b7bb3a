// Q2_K / Q3_K / Q5_K tiles: tile_by_token_groups over quant/avx2's dot_q*_K_tokens.
#include "kernels/avx2/gemm_kquant_low.hpp"

#include "kernels/avx2/kquant_low_unpack.hpp"
#include "kernels/avx2/token_groups.hpp"

namespace okapi::kernels::avx2 {
namespace {

using quant::QK_K;

template <int G>
struct Q2_KDot {
  static void run(int64_t n_blocks, const quant::block_q2_K* x, const uint8_t* a, size_t a_row, float* out) {
    quant::avx2::dot_q2_K_tokens<G>(n_blocks, x, a, a_row, out);
  }
};
template <int G>
struct Q3_KDot {
  static void run(int64_t n_blocks, const quant::block_q3_K* x, const uint8_t* a, size_t a_row, float* out) {
    quant::avx2::dot_q3_K_tokens<G>(n_blocks, x, a, a_row, out);
  }
};
template <int G>
struct Q5_KDot {
  static void run(int64_t n_blocks, const quant::block_q5_K* x, const uint8_t* a, size_t a_row, float* out) {
    quant::avx2::dot_q5_K_tokens<G>(n_blocks, x, a, a_row, out);
  }
};

}  // namespace

void tile_q2_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile_by_token_groups<quant::block_q2_K, QK_K, Q2_KDot>(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

void tile_q3_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile_by_token_groups<quant::block_q3_K, QK_K, Q3_KDot>(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

void tile_q5_K_q8_K(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile_by_token_groups<quant::block_q5_K, QK_K, Q5_KDot>(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

}  // namespace okapi::kernels::avx2
