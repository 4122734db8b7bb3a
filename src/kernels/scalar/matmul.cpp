// Reference matmul: one thread, the table's scalar (_ref) kernels, the obvious loop order.
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/matmul_plan.hpp"

namespace okapi::kernels::ref {

void matmul(DType w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens, float* y) {
  const detail::MatmulPlan plan = detail::plan_matmul(Isa::scalar, w_type, w, n_in, n_out, n_tokens);
  const auto* w_bytes = static_cast<const uint8_t*>(w);
  if (plan.dequantize_path) {
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < n_out; ++o) {
      plan.format->dequantize_ref(w_bytes + static_cast<size_t>(o) * plan.w_row_bytes, row.data(), n_in);
      for (int64_t t = 0; t < n_tokens; ++t) {
        y[t * n_out + o] = dot_f32(row.data(), x + t * n_in, n_in) * plan.scale;
      }
    }
    return;
  }
  std::vector<uint8_t> quantized;
  const auto* a = reinterpret_cast<const uint8_t*>(x);
  if (!plan.float_activations) {
    quantized.resize(plan.a_row_bytes * static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) {
      plan.a_format->quantize_ref(x + t * n_in, quantized.data() + static_cast<size_t>(t) * plan.a_row_bytes, n_in);
    }
    a = quantized.data();
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t o = 0; o < n_out; ++o) {
      const float dot = plan.format->vec_dot_ref(n_in, w_bytes + static_cast<size_t>(o) * plan.w_row_bytes,
                                                 a + static_cast<size_t>(t) * plan.a_row_bytes);
      y[t * n_out + o] = dot * plan.scale;
    }
  }
}

}  // namespace okapi::kernels::ref
