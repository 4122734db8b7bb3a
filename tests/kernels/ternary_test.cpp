// TQ1_0, TQ2_0, I2_S, IQ1_BN and IQ2_BN rows: exact round trips on ternary weights, error bounds
// on other weights, byte layouts, dot products, I2_S's per-tensor scale and edge cases.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/row_checks.hpp"

namespace okapi::test {
namespace {

using quant::block_q8_0;
using quant::block_q8_K;
using quant::QK_K;

// s * {-1, 0, +1}, uniformly drawn; element 0 is +s so every 256-block has its max at s.
std::vector<float> ternary_row(int64_t n, uint32_t seed, float s) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> trit(-1, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = s * static_cast<float>(trit(rng));
  for (size_t i = 0; i < v.size(); i += QK_K) v[i] = s;
  return v;
}

// Q8_K activations for the TQ dot products (the table's Q8_K row belongs to the k-quants; this
// local version keeps the test independent of it): d = amax / 127, q = round(x / d).
std::vector<block_q8_K> q8_k_row(const std::vector<float>& a) {
  std::vector<block_q8_K> blocks(a.size() / QK_K);
  for (size_t b = 0; b < blocks.size(); ++b) {
    const float* x = a.data() + b * QK_K;
    float amax = 0;
    for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
    blocks[b].d = amax / 127;
    for (int j = 0; j < QK_K; ++j) {
      blocks[b].qs[j] = static_cast<int8_t>(amax > 0 ? std::lround(x[j] / blocks[b].d) : 0);
    }
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += blocks[b].qs[16 * g + j];
      blocks[b].bsums[g] = static_cast<int16_t>(sum);
    }
  }
  return blocks;
}

// ---- TQ1_0 / TQ2_0 ----

TEST(Ternary, TqRowsPairWithQ8K) {
  for (DType t : {DType::TQ1_0, DType::TQ2_0}) {
    const auto& f = quant::format(t);
    EXPECT_EQ(f.vec_dot_type, DType::Q8_K);
    EXPECT_NE(f.quantize_ref, nullptr);
    EXPECT_NE(f.vec_dot_ref, nullptr);
  }
}

TEST(Ternary, TqRoundTripIsExactOnTernaryWeights) {
  for (DType t : {DType::TQ1_0, DType::TQ2_0}) {
    for (float s : {5.0f / 64, 3.0f / 64, 1.0f}) {  // exact in fp16
      const auto x = ternary_row(QK_K * 6, 41, s);
      EXPECT_EQ(dequantize_row(t, quantize_row(t, x), QK_K * 6), x) << dtype_name(t) << " s=" << s;
    }
  }
}

// Each value becomes round(x / amax) in {-1, 0, 1} times fp16(amax): error <= amax / 2 (+ fp16).
TEST(Ternary, TqRoundTripBoundOnGaussianWeights) {
  const auto x = gaussian_row(QK_K * 4, 42);
  for (DType t : {DType::TQ1_0, DType::TQ2_0}) {
    const auto y = dequantize_row(t, quantize_row(t, x), QK_K * 4);
    for (int b = 0; b < 4; ++b) {
      float amax = 0;
      for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[b * QK_K + j]));
      for (int j = 0; j < QK_K; ++j) {
        const size_t i = static_cast<size_t>(b * QK_K + j);
        ASSERT_LE(std::fabs(y[i] - x[i]), amax * (0.5f + 0x1p-10f)) << dtype_name(t) << " " << i;
      }
    }
  }
}

TEST(Ternary, TqEdgeCases) {
  std::vector<float> zero(QK_K, 0.0f);
  std::vector<float> spike(QK_K, 1e-3f);
  spike[100] = -1e4f;  // a single huge (negative) value: it survives, everything else rounds to 0
  for (DType t : {DType::TQ1_0, DType::TQ2_0}) {
    for (float v : dequantize_row(t, quantize_row(t, zero), QK_K)) EXPECT_EQ(v, 0.0f) << dtype_name(t);
    const auto y = dequantize_row(t, quantize_row(t, spike), QK_K);
    EXPECT_NEAR(y[100], -1e4f, 1e4f * 0x1p-11f) << dtype_name(t);
    for (int j = 0; j < QK_K; ++j) {
      if (j != 100) {
        EXPECT_EQ(y[j], 0.0f) << dtype_name(t) << " " << j;
      }
    }
  }
}

// TQ2_0 layout: value 128h + 32l + m sits in bits 2l..2l+1 of byte 32h + m, code = trit + 1.
TEST(Ternary, Tq2_0Layout) {
  std::vector<float> x(QK_K, 0.0f);
  x[0] = 1.0f;          // byte 0, lane 0: code 2
  x[32 + 1] = -1.0f;    // byte 1, lane 1: code 0 (others in the byte stay 1)
  x[128 + 96 + 31] = 1.0f;  // byte 63, lane 3: code 2
  const auto q = quantize_row(DType::TQ2_0, x);
  EXPECT_EQ(q[0], 0b01010110);
  EXPECT_EQ(q[1], 0b01010001);
  EXPECT_EQ(q[2], 0b01010101);
  EXPECT_EQ(q[63], 0b10010101);
  EXPECT_EQ(fp16_to_fp32(static_cast<uint16_t>(q[64] | (q[65] << 8))), 1.0f);
}

// TQ1_0 layout: 5 trits per byte, first value most significant, stored as ceil(t * 256 / 243).
TEST(Ternary, Tq1_0Layout) {
  std::vector<float> x(QK_K, -1.0f);  // all codes 0 -> every byte 0
  x[0] = 1.0f;                        // byte 0: t = 2 * 81 = 162 -> ceil(162 * 256 / 243) = 171
  x[160 + 16 * 4] = 0.0f;             // byte 32, 5th trit: t = 1 -> ceil(256 / 243) = 2
  x[240 + 3] = 1.0f;                  // qh[3], 1st trit: t = 2 * 27 * 3 = 162 -> 171
  const auto q = quantize_row(DType::TQ1_0, x);
  EXPECT_EQ(q[0], 171);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[32], 2);
  EXPECT_EQ(q[48 + 3], 171);
  EXPECT_EQ(q[48], 0);
}

// Every 5-trit byte value decodes back to its trits.
TEST(Ternary, Tq1_0AllTritPatternsRoundTrip) {
  std::vector<float> x(QK_K, 0.0f);
  x[255] = 1.0f;  // fixes amax = 1
  for (int t = 0; t < 243; ++t) {
    int digits = t;
    for (int k = 4; k >= 0; --k, digits /= 3) x[static_cast<size_t>(32 * k)] = static_cast<float>(digits % 3 - 1);
    const auto y = dequantize_row(DType::TQ1_0, quantize_row(DType::TQ1_0, x), QK_K);
    for (int k = 0; k < 5; ++k) ASSERT_EQ(y[static_cast<size_t>(32 * k)], x[static_cast<size_t>(32 * k)]) << t;
  }
}

TEST(Ternary, TqDotMatchesDequantizedDot) {
  for (DType t : {DType::TQ1_0, DType::TQ2_0}) {
    for (uint32_t seed : {51u, 52u}) {
      const auto w = quantize_row(t, ternary_row(QK_K * 8, seed, 3.0f / 64));
      const auto wd = dequantize_row(t, w, QK_K * 8);
      const auto a = q8_k_row(gaussian_row(QK_K * 8, seed + 1));
      double reference = 0;
      double magnitude = 0;
      for (size_t i = 0; i < wd.size(); ++i) {
        const auto& blk = a[i / QK_K];
        const double p = static_cast<double>(wd[i]) * (blk.d * blk.qs[i % QK_K]);
        reference += p;
        magnitude += std::fabs(p);
      }
      const float dot = quant::format(t).vec_dot_ref(QK_K * 8, w.data(), a.data());
      EXPECT_NEAR(dot, reference, 2e-6 * magnitude) << dtype_name(t);
    }
  }
}

// ---- I2_S ----

constexpr int64_t kI2sBlock = 128;

TEST(Ternary, I2sRowAndTensorLayout) {
  const auto& f = quant::format(DType::I2_S);
  EXPECT_EQ(f.vec_dot_type, DType::I8_S);  // bitnet.cpp's per-token int8 activations
  const std::array<int64_t, 2> shape{256, 3};
  EXPECT_EQ(tensor_bytes(DType::I2_S, shape), 256u * 3 / 4 + 32);  // n/4 packed + 32-byte tail
  const std::array<int64_t, 2> misfit{192, 3};
  EXPECT_FALSE(tensor_bytes(DType::I2_S, misfit));
}

// x86 packing: byte g of a 128-block holds values g, g+32, g+64, g+96 at bit shifts 6, 4, 2, 0;
// codes 0, 1, 2 mean -1, 0, +1.
TEST(Ternary, I2sBytesByHand) {
  std::vector<float> x(kI2sBlock, 0.0f);
  x[0] = 1.0f;       // byte 0, shift 6: code 2
  x[32] = -1.0f;     // byte 0, shift 4: code 0
  x[64 + 5] = 1.0f;  // byte 5, shift 2: code 2
  x[96 + 31] = -1.0f;  // byte 31, shift 0: code 0
  const auto q = quantize_row(DType::I2_S, x);
  ASSERT_EQ(q.size(), 32u);
  EXPECT_EQ(q[0], 0b10000101);
  EXPECT_EQ(q[5], 0b01011001);
  EXPECT_EQ(q[31], 0b01010100);
  EXPECT_EQ(q[1], 0b01010101);
  const auto y = dequantize_row(DType::I2_S, q, kI2sBlock);
  EXPECT_EQ(y, x);
}

TEST(Ternary, I2sTensorRoundTripIsExactAndStoresScale) {
  const std::array<int64_t, 2> shape{256, 4};
  const float s = 7.0f / 128;
  auto x = ternary_row(256 * 4, 61, s);
  x[700] = -s;
  const auto bytes = quant::quantize_tensor(DType::I2_S, x.data(), shape, true);
  ASSERT_EQ(bytes.size(), 256u * 4 / 4 + 32);
  float stored;
  std::memcpy(&stored, bytes.data() + 256, sizeof(stored));
  EXPECT_EQ(stored, s);
  EXPECT_EQ(quant::tensor_scale(DType::I2_S, bytes, shape), s);
  for (size_t i = 260; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], 0) << i;
  std::vector<float> y(x.size());
  quant::dequantize_tensor(DType::I2_S, bytes, shape, y.data(), true);
  EXPECT_EQ(y, x);
  EXPECT_EQ(quant::tensor_scale(DType::Q8_0, {}, shape), 1.0f);
}

// bitnet.cpp's quantize_i2_s keeps the sign of each weight (|w| < 1e-6 counts as 0); the scale
// is max |w| over the whole tensor, here a negative value.
TEST(Ternary, I2sNonTernaryWeightsKeepTheirSign) {
  const std::array<int64_t, 1> shape{kI2sBlock};
  std::vector<float> x(kI2sBlock, 0.0f);
  x[0] = 0.3f;
  x[1] = -0.01f;
  x[2] = 5e-7f;
  x[3] = -2.0f;
  const auto bytes = quant::quantize_tensor(DType::I2_S, x.data(), shape, true);
  std::vector<float> y(x.size());
  quant::dequantize_tensor(DType::I2_S, bytes, shape, y.data(), true);
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], -2.0f);
  EXPECT_EQ(y[4], 0.0f);
  const std::vector<float> zero(kI2sBlock, 0.0f);
  const auto zbytes = quant::quantize_tensor(DType::I2_S, zero.data(), shape, true);
  quant::dequantize_tensor(DType::I2_S, zbytes, shape, y.data(), true);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// The row dot product is at unit scale; times the tensor scale it equals the dequantized dot.
TEST(Ternary, I2sDotMatchesDequantizedDot) {
  const std::array<int64_t, 1> shape{kI2sBlock * 6};
  const float s = 5.0f / 64;
  const auto w = ternary_row(kI2sBlock * 6, 71, s);
  const auto bytes = quant::quantize_tensor(DType::I2_S, w.data(), shape, true);
  const DotCheck unit = dot_check(DType::I2_S, w, gaussian_row(kI2sBlock * 6, 72));
  EXPECT_NEAR(unit.dot, unit.reference, 2e-6 * unit.magnitude);  // row level: unit scale
  const float scaled = unit.dot * quant::tensor_scale(DType::I2_S, bytes, shape);
  EXPECT_NEAR(scaled, unit.reference * s, 2e-6 * unit.magnitude * s);
}

TEST(Ternary, I2sRejectsShortData) {
  const std::array<int64_t, 1> shape{kI2sBlock};
  const std::vector<uint8_t> packed_only(32, 0x55);  // the 32-byte tail is missing
  std::vector<float> y(kI2sBlock);
  EXPECT_THROW(quant::dequantize_tensor(DType::I2_S, packed_only, shape, y.data(), true), Error);
  EXPECT_THROW((void)quant::tensor_scale(DType::I2_S, packed_only, shape), Error);
}

// ---- IQ1_BN / IQ2_BN (read only) ----

TEST(Ternary, BnRowsAreReadOnly) {
  for (DType t : {DType::IQ1_BN, DType::IQ2_BN}) {
    const auto& f = quant::format(t);
    EXPECT_EQ(f.quantize_ref, nullptr);
    EXPECT_EQ(f.vec_dot_ref, nullptr);
    const std::array<int64_t, 1> shape{64};
    const std::vector<float> x(64, 1.0f);
    EXPECT_THROW((void)quant::quantize_tensor(t, x.data(), shape, true), Error);
  }
}

// IQ2_BN row: f32 scale, then per 64 values 16 bytes; value 16g + i in bits 2g of byte i.
TEST(Ternary, Iq2BnRowByHand) {
  std::vector<uint8_t> row(4 + 16, 0x55);  // every code 1 -> 0
  const float d = 0.25f;
  std::memcpy(row.data(), &d, sizeof(d));
  row[4 + 0] = 0b01010110;   // value 0: code 2 -> +d
  row[4 + 15] = 0b00010101;  // value 48 + 15 = 63: code 0 -> -d
  const auto y = dequantize_row(DType::IQ2_BN, row, 64);
  for (int e = 0; e < 64; ++e) {
    const float expected = e == 0 ? d : e == 63 ? -d : 0.0f;
    EXPECT_EQ(y[static_cast<size_t>(e)], expected) << e;
  }
}

// IQ1_BN row: f16 scale, then per 64 values ql[12] + extra. Group g (16 values) is ql[3g..3g+2]
// (value 5k + j of the group = trit j of byte k, trit 0 least significant) plus trit g of extra;
// a byte holds ceil(t * 256 / 243) of its base-3 number t (ik_llama's quantize_one_row_1bn).
TEST(Ternary, Iq1BnRowDecodesEncodedTrits) {
  std::mt19937 rng(81);
  std::uniform_int_distribution<int> trit(0, 2);
  std::vector<int> codes(64);
  for (auto& c : codes) c = trit(rng);
  std::vector<uint8_t> row(2 + 13, 0);
  const uint16_t d = fp32_to_fp16(0.5f);
  std::memcpy(row.data(), &d, sizeof(d));
  auto pack = [](int t) { return static_cast<uint8_t>((t * 256 + 242) / 243); };
  int extra = 0;
  for (int g = 0, power = 1; g < 4; ++g, power *= 3) {
    for (int k = 0; k < 3; ++k) {
      int t = 0;
      for (int j = 4; j >= 0; --j) t = t * 3 + codes[static_cast<size_t>(16 * g + 5 * k + j)];
      row[static_cast<size_t>(2 + 3 * g + k)] = pack(t);
    }
    extra += power * codes[static_cast<size_t>(16 * g + 15)];
  }
  row[2 + 12] = pack(extra);
  const auto y = dequantize_row(DType::IQ1_BN, row, 64);
  for (size_t e = 0; e < 64; ++e) EXPECT_EQ(y[e], 0.5f * static_cast<float>(codes[e] - 1)) << e;
}

}  // namespace
}  // namespace okapi::test
