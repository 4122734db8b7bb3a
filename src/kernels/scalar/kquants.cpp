// Registers the k-quant rows of the format table. Every weight format pairs with Q8_K
// activations; Q8_K itself has no dot product (ggml has none either).
#include "kernels/format_table.hpp"
#include "kernels/scalar/kquant_rows.hpp"

namespace okapi::quant::detail {

void add_kquant_formats(std::vector<Format>& table) {
  using namespace okapi::quant::kquant;
  const auto weight_format = [](DType type, DequantizeRowFn dequantize, QuantizeRowFn quantize, VecDotFn dot) {
    return reference_format(type, dequantize, quantize, DType::Q8_K, dot);
  };
  table.push_back(weight_format(DType::Q2_K, dequantize_q2_K, quantize_q2_K, vec_dot_q2_K));
  table.push_back(weight_format(DType::Q3_K, dequantize_q3_K, quantize_q3_K, vec_dot_q3_K));
  table.push_back(weight_format(DType::Q4_K, dequantize_q4_K, quantize_q4_K, vec_dot_q4_K));
  table.push_back(weight_format(DType::Q5_K, dequantize_q5_K, quantize_q5_K, vec_dot_q5_K));
  table.push_back(weight_format(DType::Q6_K, dequantize_q6_K, quantize_q6_K, vec_dot_q6_K));
  table.push_back(weight_format(DType::Q8_K, dequantize_q8_K, quantize_q8_K, nullptr));
  // ggml's quantize_q*_K with quant_weights (quantize_row_q*_K_impl).
  const auto set_weighted = [&table](DType type, QuantizeWeightedRowFn fn) {
    for (Format& f : table) {
      if (f.type == type) f.quantize_weighted = fn;
    }
  };
  set_weighted(DType::Q2_K, quantize_q2_K_weighted);
  set_weighted(DType::Q3_K, quantize_q3_K_weighted);
  set_weighted(DType::Q4_K, quantize_q4_K_weighted);
  set_weighted(DType::Q5_K, quantize_q5_K_weighted);
  set_weighted(DType::Q6_K, quantize_q6_K_weighted);
}

}  // namespace okapi::quant::detail
