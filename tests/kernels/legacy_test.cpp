// Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 rows: round-trip error bounds, the dot products against the
// dequantized rows, the Q8_1 sum field, hand-checked bytes and edge-case blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/row_checks.hpp"

namespace okapi::test {
namespace {

using quant::block_q4_0;
using quant::block_q5_0;
using quant::block_q8_1;

constexpr DType kLegacy[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1};

struct Levels {
  int steps;        // quantization steps across the block's range
  bool symmetric;   // range [-amax, amax] (x_0 types) or [min, max] (x_1 types)
};

Levels levels(DType t) {
  switch (t) {
    case DType::Q4_0: return {8, true};    // d = max / -8
    case DType::Q5_0: return {16, true};   // d = max / -16
    case DType::Q8_0:
    case DType::Q8_1: return {127, true};  // d = amax / 127
    case DType::Q4_1: return {15, false};  // d = (max - min) / 15
    default: return {31, false};           // Q5_1: d = (max - min) / 31
  }
}

// Largest error a value of this block may have after a round trip: half a step (a whole step for
// Q4_0/Q5_0, where the value opposite the signed max can be clamped), plus the fp16 rounding of
// the stored scale (and min) times the largest quant.
float error_bound(DType t, const float* x) {
  const Levels l = levels(t);
  const float lo = *std::min_element(x, x + 32);
  const float hi = *std::max_element(x, x + 32);
  const float amax = std::max(std::fabs(lo), std::fabs(hi));
  const float d = l.symmetric ? amax / static_cast<float>(l.steps) : (hi - lo) / static_cast<float>(l.steps);
  const bool clamps = t == DType::Q4_0 || t == DType::Q5_0;
  const float fp16_slack = 2.0f * static_cast<float>(l.steps) * d * 0x1p-11f + std::fabs(lo) * 0x1p-11f;
  return (clamps ? 1.0f : 0.5f) * d * 1.0001f + fp16_slack + 1e-30f;
}

void expect_round_trip_within_bounds(DType t, const std::vector<float>& x) {
  const auto y = dequantize_row(t, quantize_row(t, x), static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float bound = error_bound(t, x.data() + 32 * b);
    for (size_t j = 32 * b; j < 32 * b + 32; ++j) {
      ASSERT_LE(std::fabs(y[j] - x[j]), bound) << dtype_name(t) << " value " << j << " = " << x[j];
    }
  }
}

TEST(Legacy, RowsAndPairings) {
  EXPECT_EQ(quant::format(DType::Q4_0).vec_dot_type, DType::Q8_0);
  EXPECT_EQ(quant::format(DType::Q5_0).vec_dot_type, DType::Q8_0);
  EXPECT_EQ(quant::format(DType::Q8_0).vec_dot_type, DType::Q8_0);
  EXPECT_EQ(quant::format(DType::Q4_1).vec_dot_type, DType::Q8_1);
  EXPECT_EQ(quant::format(DType::Q5_1).vec_dot_type, DType::Q8_1);
  EXPECT_EQ(quant::format(DType::Q8_1).vec_dot_ref, nullptr);  // activation-only, as in ggml
  for (DType t : kLegacy) EXPECT_NE(quant::format(t).quantize_ref, nullptr) << dtype_name(t);
}

TEST(Legacy, RoundTripErrorBoundsOnRandomData) {
  for (DType t : kLegacy) {
    expect_round_trip_within_bounds(t, gaussian_row(32 * 64, 11));
    expect_round_trip_within_bounds(t, gaussian_row(32 * 64, 12, 1e-3f));
  }
}

TEST(Legacy, EdgeCaseBlocks) {
  std::vector<float> zero(32, 0.0f);
  std::vector<float> spike(32, 1e-3f);
  spike[7] = 1e4f;
  std::vector<float> negative_max = gaussian_row(32, 13);
  negative_max[20] = -50.0f;
  std::vector<float> constant(32, 0.75f);
  for (DType t : kLegacy) {
    const auto z = dequantize_row(t, quantize_row(t, zero), 32);
    for (float v : z) EXPECT_EQ(v, 0.0f) << dtype_name(t);  // d = 0: no NaN from 0 * inf
    expect_round_trip_within_bounds(t, spike);
    const auto s = dequantize_row(t, quantize_row(t, spike), 32);
    EXPECT_NEAR(s[7], 1e4f, 1e4f * 0x1p-10f) << dtype_name(t);
    expect_round_trip_within_bounds(t, negative_max);
    const auto m = dequantize_row(t, quantize_row(t, negative_max), 32);
    EXPECT_NEAR(m[20], -50.0f, 50.0f * 0x1p-10f) << dtype_name(t);
    expect_round_trip_within_bounds(t, constant);
  }
}

// Q4_0 bytes worked by hand: x[j] = j - 16. The signed max is -16, so d = 2 and q = round-half-up
// of x / 2 + 8; byte j holds q[j] (low nibble) and q[j + 16] (high nibble).
TEST(Legacy, Q4_0BytesByHand) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const auto q = quantize_row(DType::Q4_0, x);
  block_q4_0 b;
  std::memcpy(&b, q.data(), sizeof(b));
  EXPECT_EQ(fp16_to_fp32(b.d), 2.0f);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(std::floor((j - 16) / 2.0 + 8.5)));
    const int hi = std::min(15, static_cast<int>(std::floor(j / 2.0 + 8.5)));
    EXPECT_EQ(b.qs[j], lo | (hi << 4)) << j;
  }
}

// Q5_0's fifth bits: value j's high bit is bit j of qh (little-endian), for both halves.
TEST(Legacy, Q5_0HighBits) {
  std::vector<float> x(32, -1.0f);   // max = -1 -> d = 1/16, q = 0 for -1
  x[3] = 1.0f;                        // q = 32 -> clamped to 31: low nibble 15, high bit set
  x[16 + 5] = 0.5f;                   // q = 24: low nibble 8, high bit set
  const auto q = quantize_row(DType::Q5_0, x);
  block_q5_0 b;
  std::memcpy(&b, q.data(), sizeof(b));
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof(qh));
  EXPECT_EQ(qh, (1u << 3) | (1u << 21));
  EXPECT_EQ(b.qs[3] & 0x0F, 15);
  EXPECT_EQ(b.qs[5] >> 4, 8);
}

TEST(Legacy, Q8_1StoresScaledSum) {
  const auto x = gaussian_row(32 * 8, 14);
  const auto q = quantize_row(DType::Q8_1, x);
  for (int i = 0; i < 8; ++i) {
    block_q8_1 b;
    std::memcpy(&b, q.data() + i * sizeof(b), sizeof(b));
    int sum = 0;
    for (int8_t v : b.qs) sum += v;
    // s is computed from the float scale before it is rounded to fp16, as ggml does.
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * i + j]));
    EXPECT_EQ(b.s, fp32_to_fp16(static_cast<float>(sum) * (amax / 127))) << i;
    EXPECT_NEAR(fp16_to_fp32(b.s), fp16_to_fp32(b.d) * static_cast<float>(sum),
                std::fabs(fp16_to_fp32(b.s)) * 0x1p-9f) << i;
  }
}

// vec_dot_ref equals the dot of the dequantized rows up to float rounding. For Q4_1/Q5_1 the
// min term uses Q8_1's fp16 s, which differs from d * sum(qs) by its rounding: that is allowed.
TEST(Legacy, DotMatchesDequantizedDot) {
  const int64_t n = 32 * 128;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    for (uint32_t seed : {21u, 22u, 23u}) {
      const auto w = gaussian_row(n, seed);
      auto a = gaussian_row(n, seed + 100);
      a[5] = 8.0f;  // an outlier block
      const DotCheck c = dot_check(t, w, a);
      double s_rounding = 0;
      if (quant::format(t).vec_dot_type == DType::Q8_1) {
        for (int64_t b = 0; b < n / 32; ++b) {
          float lo = 0;
          float asum = 0;
          for (int j = 0; j < 32; ++j) {
            lo = std::min(lo, w[static_cast<size_t>(32 * b + j)]);
            asum += std::fabs(a[static_cast<size_t>(32 * b + j)]);
          }
          s_rounding += std::fabs(lo) * asum * 0x1p-10;
        }
      }
      EXPECT_NEAR(c.dot, c.reference, 2e-6 * c.magnitude + s_rounding + 1e-6) << dtype_name(t) << " seed " << seed;
    }
  }
}

TEST(Legacy, DotOfZeroRowsIsZero) {
  std::vector<float> zero(64, 0.0f);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    EXPECT_EQ(dot_check(t, zero, gaussian_row(64, 31)).dot, 0.0f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace okapi::test
