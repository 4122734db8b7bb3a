#include "core/dtype.hpp"

#include <gtest/gtest.h>

#include <array>
#include <limits>

#include "core/half.hpp"

namespace okapi {

TEST(DType, IdsAndSizesMatchGgml) {
  EXPECT_EQ(static_cast<uint32_t>(DType::Q4_K), 12u);
  EXPECT_EQ(static_cast<uint32_t>(DType::BF16), 30u);
  EXPECT_EQ(static_cast<uint32_t>(DType::TQ2_0), 35u);
  EXPECT_EQ(layout(DType::Q6_K).block_bytes, 210u);
  EXPECT_EQ(dtype_name(DType::Q4_K), "q4_K");
  EXPECT_EQ(dtype_from_name("Q4_K"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("nope"), std::nullopt);
  EXPECT_FALSE(dtype_layout(31).has_value());
}

TEST(DType, TensorBytesRejectsMisfitAndOverflow) {
  const std::array<int64_t, 2> ok{256, 3};
  EXPECT_EQ(tensor_bytes(DType::Q4_K, ok), 3u * 144u);
  const std::array<int64_t, 2> misfit{100, 3};
  EXPECT_FALSE(tensor_bytes(DType::Q4_K, misfit));
  const std::array<int64_t, 4> huge{std::numeric_limits<int64_t>::max(), 1 << 20, 1 << 20, 2};
  EXPECT_FALSE(tensor_bytes(DType::F32, huge));
  const std::array<int64_t, 2> zero{0, 4};
  EXPECT_FALSE(tensor_bytes(DType::F32, zero));
}

TEST(Half, RoundTripsEveryFp16Value) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (f != f) continue;  // NaN payloads need not round-trip bit for bit
    EXPECT_EQ(fp32_to_fp16(f), h) << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and the next fp16; ties go to the even mantissa (1.0).
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // rounds to +inf
  EXPECT_EQ(fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
}

}  // namespace okapi
