// Installs the AVX2 kernels into the format tables of the avx2 tier and above (table.cpp builds
// those only when the tier in use, okapi::isa(), allows). A dot kernel or a multi-token tile is
// installed only when the row pairs with the activation format the kernel was written for.
#include <vector>

#include "kernels/avx2/gemm_kquant.hpp"
#include "kernels/avx2/gemm_kquant_low.hpp"
#include "kernels/avx2/gemm_legacy.hpp"
#include "kernels/avx2/gemm_q8_0.hpp"
#include "kernels/avx2/row_kernels.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quant::detail {
namespace {

void set_dot(Format& f, DType activation, VecDotFn fn) {
  if (f.vec_dot_ref != nullptr && f.vec_dot_type == activation) f.vec_dot = fn;
}

void set_dequantize(Format& f, DequantizeRowFn fn) {
  if (f.dequantize_ref != nullptr) f.dequantize = fn;
}

void set_quantize(Format& f, QuantizeRowFn fn) {
  if (f.quantize_ref != nullptr) f.quantize = fn;
}

// The multi-token tiles (kernels/avx2/gemm_*.hpp), likewise only for the activation format they
// were written for.
void set_tiles(Format& f, DType activation, kernels::avx2::Q8_0TileFn tile) {
  if (f.vec_dot_type == activation) f.tiles = {tile, true};
}

template <kernels::avx2::Q8_KTileFn kTile>
void tile_without_scales(int64_t n, const uint8_t* w, size_t w_row, int64_t n_rows, const uint8_t* a, size_t a_row,
                         const float*, int64_t n_tokens, float scale, float* y, int64_t y_stride) {
  kTile(n, w, w_row, n_rows, a, a_row, n_tokens, scale, y, y_stride);
}

template <kernels::avx2::Q8_KTileFn kTile>
void set_tiles(Format& f, DType activation) {
  if (f.vec_dot_type == activation) f.tiles = {tile_without_scales<kTile>, false};
}

}  // namespace

void use_avx2_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    switch (f.type) {
      case DType::F32:
        set_dequantize(f, avx2::dequantize_f32);
        set_dot(f, DType::F32, avx2::vec_dot_f32);
        break;
      case DType::F16:
        set_dequantize(f, avx2::dequantize_f16);
        set_quantize(f, avx2::quantize_f16);
        set_dot(f, DType::F16, avx2::vec_dot_f16);
        break;
      case DType::Q4_0:
        set_dequantize(f, avx2::dequantize_q4_0);
        set_dot(f, DType::Q8_0, avx2::vec_dot_q4_0_q8_0);
        set_tiles(f, DType::Q8_0, kernels::avx2::tile_q4_0_q8_0);
        break;
      case DType::Q4_1:
        set_dot(f, DType::Q8_1, avx2::vec_dot_q4_1_q8_1);
        set_tiles<kernels::avx2::tile_q4_1_q8_1>(f, DType::Q8_1);
        break;
      case DType::Q5_0:
        set_dequantize(f, avx2::dequantize_q5_0);
        set_dot(f, DType::Q8_0, avx2::vec_dot_q5_0_q8_0);
        set_tiles<kernels::avx2::tile_q5_0_q8_0>(f, DType::Q8_0);
        break;
      case DType::Q5_1:
        set_dot(f, DType::Q8_1, avx2::vec_dot_q5_1_q8_1);
        set_tiles<kernels::avx2::tile_q5_1_q8_1>(f, DType::Q8_1);
        break;
      case DType::Q8_0:
        set_dequantize(f, avx2::dequantize_q8_0);
        set_quantize(f, avx2::quantize_q8_0);
        set_dot(f, DType::Q8_0, avx2::vec_dot_q8_0_q8_0);
        set_tiles(f, DType::Q8_0, kernels::avx2::tile_q8_0_q8_0);
        break;
      case DType::IQ4_NL:
        set_dequantize(f, avx2::dequantize_iq4_nl);
        break;
      case DType::Q8_1:
        set_quantize(f, avx2::quantize_q8_1);
        break;
      case DType::Q2_K:
        set_dot(f, DType::Q8_K, avx2::vec_dot_q2_K_q8_K);
        set_tiles<kernels::avx2::tile_q2_K_q8_K>(f, DType::Q8_K);
        break;
      case DType::Q3_K:
        set_dot(f, DType::Q8_K, avx2::vec_dot_q3_K_q8_K);
        set_tiles<kernels::avx2::tile_q3_K_q8_K>(f, DType::Q8_K);
        break;
      case DType::Q4_K:
        set_dequantize(f, avx2::dequantize_q4_K);
        set_dot(f, DType::Q8_K, avx2::vec_dot_q4_K_q8_K);
        set_tiles<kernels::avx2::tile_q4_K_q8_K>(f, DType::Q8_K);
        break;
      case DType::Q5_K:
        set_dot(f, DType::Q8_K, avx2::vec_dot_q5_K_q8_K);
        set_tiles<kernels::avx2::tile_q5_K_q8_K>(f, DType::Q8_K);
        break;
      case DType::Q6_K:
        set_dequantize(f, avx2::dequantize_q6_K);
        set_dot(f, DType::Q8_K, avx2::vec_dot_q6_K_q8_K);
        set_tiles<kernels::avx2::tile_q6_K_q8_K>(f, DType::Q8_K);
        break;
      case DType::Q8_K:
        set_quantize(f, avx2::quantize_q8_K);
        break;
      case DType::TQ2_0:
        set_dequantize(f, avx2::dequantize_tq2_0);
        set_dot(f, DType::Q8_K, avx2::vec_dot_tq2_0_q8_K);
        break;
      case DType::I2_S:
        set_dot(f, DType::I8_S, avx2::vec_dot_i2_s_i8_s);
        break;
      default:
        break;
    }
  }
  use_avx2_iq_kernels(table);
  use_avx2_iq2_kernels(table);
  use_avx2_iq3_kernels(table);
  use_avx2_iq1_kernels(table);
}

}  // namespace okapi::quant::detail
