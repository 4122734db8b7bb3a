#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quant {
namespace {

struct RowGeometry {
  int64_t row_length;
  int64_t n_rows;
  size_t row_bytes;
  size_t rows_bytes() const { return static_cast<size_t>(n_rows) * row_bytes; }
};

RowGeometry geometry(DType type, std::span<const int64_t> shape, size_t data_size) {
  const auto total = tensor_bytes(type, shape);
  if (!total) throw_error("{} tensor shape does not fit the format's block size", dtype_name(type));
  if (data_size < *total) throw_error("{} tensor needs {} bytes, got {}", dtype_name(type), *total, data_size);
  RowGeometry g{shape[0], 1, *row_bytes(type, shape[0])};
  for (size_t i = 1; i < shape.size(); ++i) g.n_rows *= shape[i];
  return g;
}

// bitnet.cpp's I2_S: after all packed rows comes a 32-byte tail whose first 4 bytes are the
// tensor's float scale (max |w| over the whole tensor); the other 28 bytes are padding.
float read_i2s_scale(std::span<const uint8_t> data, const RowGeometry& g) {
  float scale;
  std::memcpy(&scale, data.data() + g.rows_bytes(), sizeof(scale));
  return scale;
}

}  // namespace

float tensor_scale(DType type, std::span<const uint8_t> data, std::span<const int64_t> shape) {
  if (type != DType::I2_S) return 1.0f;
  return read_i2s_scale(data, geometry(type, shape, data.size()));
}

void dequantize_tensor(DType type, std::span<const uint8_t> data, std::span<const int64_t> shape,
                       float* out, bool use_reference) {
  const Format& f = format(type);
  const RowGeometry g = geometry(type, shape, data.size());
  const DequantizeRowFn fn = use_reference ? f.dequantize_ref : f.dequantize;
  for (int64_t r = 0; r < g.n_rows; ++r) {
    fn(data.data() + static_cast<size_t>(r) * g.row_bytes, out + r * g.row_length, g.row_length);
  }
  if (type == DType::I2_S) {
    // The rows decode to {-1, 0, +1}; multiplying by the scale is exact.
    const float scale = read_i2s_scale(data, g);
    std::for_each(out, out + g.n_rows * g.row_length, [scale](float& v) { v *= scale; });
  }
}

std::vector<uint8_t> quantize_tensor(DType type, const float* src, std::span<const int64_t> shape,
                                     bool use_reference) {
  const Format& f = format(type);
  const QuantizeRowFn fn = use_reference ? f.quantize_ref : f.quantize;
  if (fn == nullptr && f.requires_importance) {
    throw_error("quantizing to {} needs an importance matrix (as in llama.cpp)", dtype_name(type));
  }
  if (fn == nullptr) throw_error("okapi cannot quantize to {}", dtype_name(type));
  const auto total = tensor_bytes(type, shape);
  if (!total) throw_error("{} tensor shape does not fit the format's block size", dtype_name(type));
  std::vector<uint8_t> out(*total);
  const RowGeometry g = geometry(type, shape, out.size());
  for (int64_t r = 0; r < g.n_rows; ++r) {
    fn(src + r * g.row_length, out.data() + static_cast<size_t>(r) * g.row_bytes, g.row_length);
  }
  if (type == DType::I2_S) {
    // The row quantizer needs only the signs; the tensor scale goes into the tail.
    float scale = 0.0f;
    for (int64_t i = 0; i < g.n_rows * g.row_length; ++i) scale = std::fmax(scale, std::fabs(src[i]));
    std::memcpy(out.data() + g.rows_bytes(), &scale, sizeof(scale));
  }
  return out;
}

}  // namespace okapi::quant
