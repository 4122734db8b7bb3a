#include "kernels/gelu_table.hpp"

#include <array>
#include <cmath>
#include <cstdint>

#include "core/half.hpp"

namespace okapi::kernels::detail {
namespace {

constexpr float kGeluCoefA = 0.044715f;
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;

std::array<uint16_t, 65536> build_table() {
  std::array<uint16_t, 65536> table{};
  for (uint32_t i = 0; i < table.size(); ++i) {
    table[i] = fp32_to_fp16(gelu_tanh_exact(fp16_to_fp32(static_cast<uint16_t>(i))));
  }
  return table;
}

}  // namespace

float gelu_tanh_exact(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kGeluCoefA * x * x)));
}

float gelu_tanh_table(float x) {
  static const std::array<uint16_t, 65536> table = build_table();
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return fp16_to_fp32(table[fp32_to_fp16(x)]);
}

}  // namespace okapi::kernels::detail
