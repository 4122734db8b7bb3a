// What a matmul needs to know about its weight format, shared by the reference and the threaded
// matmul: row sizes, how activations are prepared, the per-tensor scale.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "kernels/format_table.hpp"

namespace okapi::kernels::detail {

struct MatmulPlan {
  const quant::Format* format = nullptr;
  size_t w_row_bytes = 0;
  // No vec_dot for this format (IQ1_BN, IQ2_BN): dequantize weight rows, dot with float x.
  bool dequantize_path = false;
  // Activations are used as given (F32 vec_dot_type, or the dequantize path).
  bool float_activations = false;
  DType a_type = DType::F32;  // activation format the dot product pairs with
  const quant::Format* a_format = nullptr;  // its table row: quantize / quantize_ref
  size_t a_row_bytes = 0;     // bytes of one prepared activation row
  float scale = 1.0f;         // per-tensor factor of every result (I2_S), 1 otherwise
};

// Validates the shapes (throws okapi::Error) and reads the per-tensor scale from `w`. The format
// rows come from the table of `tier`.
MatmulPlan plan_matmul(Isa tier, DType w_type, const void* w, int64_t n_in, int64_t n_out, int64_t n_tokens);

}  // namespace okapi::kernels::detail
