// F32 / F16 / BF16 rows of the weight-format table.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "core/half.hpp"
#include "kernels/row_checks.hpp"

namespace okapi::test {
namespace {

TEST(FloatTypes, RowsPairWithThemselves) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const auto& f = quant::format(t);
    EXPECT_EQ(f.vec_dot_type, t);
    EXPECT_NE(f.dequantize_ref, nullptr);
    EXPECT_NE(f.quantize_ref, nullptr);
    EXPECT_NE(f.vec_dot_ref, nullptr);
  }
}

TEST(FloatTypes, F32RoundTripIsExact) {
  const auto x = gaussian_row(333, 1);
  const auto y = dequantize_row(DType::F32, quantize_row(DType::F32, x), 333);
  EXPECT_EQ(y, x);
}

// Round to nearest: relative error at most half an ulp of the format (2^-11 fp16, 2^-8 bf16).
TEST(FloatTypes, HalfRoundTripWithinHalfUlp) {
  const auto x = gaussian_row(4096, 2);
  const auto h = dequantize_row(DType::F16, quantize_row(DType::F16, x), 4096);
  const auto b = dequantize_row(DType::BF16, quantize_row(DType::BF16, x), 4096);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) > 6.2e-5f) {  // fp16 normal range; subnormals have a fixed absolute step
      EXPECT_LE(std::fabs(h[i] - x[i]), std::fabs(x[i]) * 0x1p-11f) << i;
    }
    EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << i;
  }
}

TEST(FloatTypes, HalfEdgeValues) {
  const std::vector<float> x = {0.0f, -0.0f, 65504.0f, 1e6f, -1e6f, std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(), 1e-8f};
  const auto h = dequantize_row(DType::F16, quantize_row(DType::F16, x), 8);
  EXPECT_EQ(std::bit_cast<uint32_t>(h[1]), 0x80000000u);  // sign of zero kept
  EXPECT_EQ(h[2], 65504.0f);                               // largest finite fp16
  EXPECT_TRUE(std::isinf(h[3]) && h[3] > 0);               // overflow saturates to inf
  EXPECT_TRUE(std::isinf(h[4]) && h[4] < 0);
  EXPECT_TRUE(std::isinf(h[5]));
  EXPECT_TRUE(std::isnan(h[6]));
  EXPECT_EQ(h[7], 0.0f);  // below half the smallest subnormal
  const auto b = dequantize_row(DType::BF16, quantize_row(DType::BF16, x), 8);
  EXPECT_EQ(b[3], 999424.0f);  // 1e6 rounded to 8 significant bits
  EXPECT_TRUE(std::isnan(b[6]));
  // Ties round to even: 1 + 2^-8 -> 1.0 (0x3f80), 1 + 3 * 2^-8 -> 1 + 2^-6 (0x3f82).
  EXPECT_EQ(quantize_row(DType::BF16, {1.00390625f, 1.01171875f}), (std::vector<uint8_t>{0x80, 0x3f, 0x82, 0x3f}));
}

// The dot products form each product in float and accumulate in double (ggml's scalar path), so
// they match the dequantized dot up to the final rounding to float.
TEST(FloatTypes, DotMatchesDequantizedDot) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const auto w = gaussian_row(1000, 3);
    const auto a = gaussian_row(1000, 4);
    const DotCheck c = dot_check(t, w, a);
    EXPECT_NEAR(c.dot, c.reference, 1e-6 * c.magnitude + 1e-6) << dtype_name(t);
  }
}

TEST(FloatTypes, DotOfEmptyRowIsZero) {
  EXPECT_EQ(quant::format(DType::F16).vec_dot_ref(0, nullptr, nullptr), 0.0f);
}

}  // namespace
}  // namespace okapi::test
