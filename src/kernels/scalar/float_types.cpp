// F32, F16 and BF16 rows: conversions and dot products as ggml's CPU backend computes them.
// Each pairs with itself (ggml converts F32 activations to the weight's float type first).
// The dot products follow ggml_vec_dot_{f32,f16,bf16}'s scalar path: every product is formed in
// float (exact for F16·F16 and BF16·BF16) and accumulated in double, then rounded once to float.
#include <cstring>

#include "core/half.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quant::detail {
namespace {

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

// F16 and BF16 differ only in their conversion pair.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
struct HalfFormat {
  static void dequantize(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = ToFloat(h[i]);
  }

  static void quantize(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = FromFloat(src[i]);
  }

  static float dot(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(ToFloat(x[i]) * ToFloat(y[i]));
    return static_cast<float>(sum);
  }

  static Format row(DType type) { return reference_format(type, dequantize, quantize, type, dot); }
};

using F16Format = HalfFormat<fp16_to_fp32, fp32_to_fp16>;
using BF16Format = HalfFormat<bf16_to_fp32, fp32_to_bf16>;

}  // namespace

void add_float_formats(std::vector<Format>& table) {
  table.push_back(reference_format(DType::F32, dequantize_f32, quantize_f32, DType::F32, dot_f32));
  table.push_back(F16Format::row(DType::F16));
  table.push_back(BF16Format::row(DType::BF16));
}

}  // namespace okapi::quant::detail
