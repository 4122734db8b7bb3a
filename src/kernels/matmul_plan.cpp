#include "kernels/matmul_plan.hpp"

#include <array>
#include <span>

#include "core/error.hpp"

namespace okapi::kernels::detail {

MatmulPlan plan_matmul(Isa tier, DType w_type, const void* w, int64_t n_in, int64_t n_out, int64_t n_tokens) {
  if (n_in <= 0 || n_out < 0 || n_tokens < 0) {
    throw_error("matmul: bad shape n_in {} n_out {} n_tokens {}", n_in, n_out, n_tokens);
  }
  MatmulPlan p;
  p.format = &quant::format(w_type, tier);
  const auto w_row = row_bytes(w_type, n_in);
  if (!w_row) {
    throw_error("matmul: n_in {} is not a multiple of {}'s block size {}", n_in, dtype_name(w_type),
                layout(w_type).block_size);
  }
  p.w_row_bytes = *w_row;
  p.dequantize_path = p.format->vec_dot == nullptr;
  p.float_activations = p.dequantize_path || p.format->vec_dot_type == DType::F32;
  p.a_type = p.dequantize_path ? DType::F32 : p.format->vec_dot_type;
  const auto a_row = row_bytes(p.a_type, n_in);
  if (!a_row) {
    throw_error("matmul: n_in {} is not a multiple of activation format {}'s block size {}", n_in,
                dtype_name(p.a_type), layout(p.a_type).block_size);
  }
  p.a_row_bytes = *a_row;
  p.a_format = &quant::format(p.a_type, tier);
  if (!p.float_activations && p.a_format->quantize_ref == nullptr) {
    throw_error("matmul: no quantizer for activation format {}", dtype_name(p.a_type));
  }
  if (w_type == DType::I2_S && n_out > 0) {
    const std::array<int64_t, 2> shape{n_in, n_out};
    const auto bytes = tensor_bytes(w_type, shape);
    if (!bytes) throw_error("matmul: I2_S tensor [{}, {}] has no valid size", n_in, n_out);
    p.scale = quant::tensor_scale(w_type, std::span(static_cast<const uint8_t*>(w), *bytes), shape);
  }
  return p;
}

}  // namespace okapi::kernels::detail
