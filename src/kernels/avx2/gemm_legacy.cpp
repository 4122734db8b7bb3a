// Q4_1 / Q5_0 / Q5_1 tiles: tile_by_token_groups over quant/avx2's dot_legacy_tokens.
#include "kernels/avx2/gemm_legacy.hpp"

#include "kernels/avx2/legacy_unpack.hpp"
#include "kernels/avx2/token_groups.hpp"

namespace okapi::kernels::avx2 {
namespace {

template <typename W>
struct LegacyDot {
  template <int G>
  struct Tokens {
    static void run(int64_t n_blocks, const typename W::Block* x, const uint8_t* a, size_t a_row, float* out) {
      quant::avx2::dot_legacy_tokens<W, G>(n_blocks, x, a, a_row, out);
    }
  };
};

template <typename W>
void tile(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row, int64_t n_tokens,
          float scale, float* y, int64_t y_stride) {
  tile_by_token_groups<typename W::Block, 32, LegacyDot<W>::template Tokens>(n, w, w_row, n_rows, a, a_row, n_tokens,
                                                                            scale, y, y_stride);
}

}  // namespace

void tile_q4_1_q8_1(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<quant::avx2::Q4_1Weights>(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

void tile_q5_0_q8_0(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<quant::avx2::Q5_0Weights>(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

void tile_q5_1_q8_1(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                    int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  tile<quant::avx2::Q5_1Weights>(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

}  // namespace okapi::kernels::avx2
