// Unit tests of the k-quant reference rows that need no golden data: round-trip error, dot products
// against dequantize-then-dot, Q8_K block sums, all-zero input, bad lengths, and a bit-exact snapshot
// of the quantizers (checked against llama.cpp by kquant_golden_test) so that a change in float
// evaluation (e.g. fused multiply-add contraction) is caught even without ../shared.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/sha256.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/row_checks.hpp"

namespace okapi::quant {
namespace {

const DType kWeightTypes[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Deterministic, platform-independent test data: an integer LCG, four draws summed (roughly
// Gaussian), scaled by a power of two so every step is exact in float.
std::vector<float> test_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::vector<float> out(n);
  uint32_t state = seed;
  for (auto& v : out) {
    int32_t sum = 0;
    for (int k = 0; k < 4; ++k) {
      state = state * 1664525u + 1013904223u;
      sum += static_cast<int32_t>(state >> 20) - 2048;  // [-2048, 2047]
    }
    v = static_cast<float>(sum) * 0x1p-11f * scale;  // std ~ 1.15 * scale
  }
  return out;
}

using test::dequantize_row;
using test::quantize_row;

TEST(KQuant, TableRowsArePresent) {
  for (DType type : kWeightTypes) {
    const Format* f = find_format(type);
    ASSERT_NE(f, nullptr) << dtype_name(type);
    EXPECT_NE(f->dequantize_ref, nullptr);
    EXPECT_NE(f->quantize_ref, nullptr);
    EXPECT_NE(f->vec_dot_ref, nullptr);
    EXPECT_EQ(f->vec_dot_type, DType::Q8_K);
  }
  const Format* q8k = find_format(DType::Q8_K);
  ASSERT_NE(q8k, nullptr);
  EXPECT_NE(q8k->quantize_ref, nullptr);
  EXPECT_NE(q8k->dequantize_ref, nullptr);
}

TEST(KQuant, RoundTripErrorIsBounded) {
  // Relative RMS error on near-Gaussian data, about 1.2x what this data measures. Much below
  // magnitude 1e-3 the fp16 super-block scales turn subnormal and lose precision (as in ggml).
  const std::pair<DType, double> bounds[] = {
      {DType::Q2_K, 0.35}, {DType::Q3_K, 0.18}, {DType::Q4_K, 0.085}, {DType::Q5_K, 0.045},
      {DType::Q6_K, 0.025}, {DType::Q8_K, 0.008}};
  for (float scale : {1e-3f, 0.05f, 1e4f}) {
    const auto x = test_values(8 * QK_K, 7, scale);
    for (const auto& [type, bound] : bounds) {
      const auto y = dequantize_row(type, quantize_row(type, x), x.size());
      EXPECT_LT(test::relative_rms_error(x, y), bound) << dtype_name(type) << " scale " << scale;
    }
  }
}

TEST(KQuant, VecDotMatchesDequantizedDot) {
  const size_t n = 4 * QK_K;
  const auto w = test_values(n, 21, 0.05f);
  const auto a = test_values(n, 22, 2.0f);
  const auto a_q8 = quantize_row(DType::Q8_K, a);
  const auto a_deq = dequantize_row(DType::Q8_K, a_q8, n);
  for (DType type : kWeightTypes) {
    const auto w_q = quantize_row(type, w);
    const auto w_deq = dequantize_row(type, w_q, n);
    double expected = 0.0, magnitude = 0.0;
    for (size_t i = 0; i < n; ++i) {
      expected += static_cast<double>(w_deq[i]) * a_deq[i];
      magnitude += std::fabs(static_cast<double>(w_deq[i]) * a_deq[i]);
    }
    const float got = format(type).vec_dot_ref(static_cast<int64_t>(n), w_q.data(), a_q8.data());
    EXPECT_NEAR(got, expected, 1e-5 * magnitude) << dtype_name(type);
  }
}

TEST(KQuant, Q8KBlockSumsAndScale) {
  auto x = test_values(2 * QK_K, 5, 3.0f);
  x[37] = -20.0f;  // the block's largest magnitude, negative: it must map to level -127
  const auto blocks = quantize_row(DType::Q8_K, x);
  for (int b = 0; b < 2; ++b) {
    block_q8_K q;
    std::memcpy(&q, blocks.data() + b * sizeof(block_q8_K), sizeof(q));
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += q.qs[16 * g + l];
      EXPECT_EQ(q.bsums[g], sum) << "block " << b << " group " << g;
    }
    for (int j = 0; j < QK_K; ++j) {
      EXPECT_NEAR(q.d * q.qs[j], x[b * QK_K + j], std::fabs(q.d) * 0.5001f);
    }
  }
  block_q8_K first;
  std::memcpy(&first, blocks.data(), sizeof(first));
  EXPECT_EQ(first.qs[37], -127);
  EXPECT_FLOAT_EQ(first.d, 20.0f / 127.0f);
}

TEST(KQuant, AllZeroInputGivesZeroBlocksAndValues) {
  const std::vector<float> zeros(2 * QK_K, 0.0f);
  for (DType type : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    const auto blocks = quantize_row(type, zeros);
    for (uint8_t byte : blocks) ASSERT_EQ(byte, 0) << dtype_name(type);
    for (float v : dequantize_row(type, blocks, zeros.size())) ASSERT_EQ(v, 0.0f) << dtype_name(type);
  }
  const std::vector<float> a = test_values(2 * QK_K, 3);
  const auto a_q8 = quantize_row(DType::Q8_K, a);
  for (DType type : kWeightTypes) {
    EXPECT_EQ(format(type).vec_dot_ref(2 * QK_K, quantize_row(type, zeros).data(), a_q8.data()), 0.0f);
  }
}

TEST(KQuant, ZeroSubBlocksStayExactlyZero) {
  auto x = test_values(QK_K, 9, 0.1f);
  for (int i = 64; i < 128; ++i) x[i] = 0.0f;  // whole sub-blocks of 16 and of 32
  for (DType type : kWeightTypes) {
    const auto y = dequantize_row(type, quantize_row(type, x), x.size());
    for (int i = 64; i < 128; ++i) EXPECT_EQ(y[i], 0.0f) << dtype_name(type) << " at " << i;
  }
}

TEST(KQuant, RowLengthNotMultipleOfBlockThrows) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> out(1024);
  std::vector<float> y(300);
  for (DType type : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    EXPECT_THROW(format(type).quantize_ref(x.data(), out.data(), 300), Error) << dtype_name(type);
    EXPECT_THROW(format(type).dequantize_ref(out.data(), y.data(), 300), Error) << dtype_name(type);
  }
  EXPECT_THROW(format(DType::Q4_K).vec_dot_ref(100, out.data(), out.data()), Error);
}

TEST(KQuant, QuantizersAreBitExactSnapshot) {
  // sha256 of quantize_ref(test_values(64 blocks, seed 1234, 0.03)), recorded from this
  // implementation after it matched every llama.cpp golden tensor (kquant_golden_test; Q8_K has no
  // golden and follows ggml's code). Compiling the quantizers with FMA contraction changes them.
  const std::pair<DType, const char*> expected[] = {
      {DType::Q2_K, "38a7123e19bf05b325524507a27dbda896cc8e39bd2b1f5aab084c251a1ea907"}, {DType::Q3_K, "d61c20b0541701b9df0421851396e3b73960179938150d7af352e37ed3ccbd18"}, {DType::Q4_K, "f5de8ae092a838d5b6d9b1cf244be8289527ff31fbbe74c873d82609ed71ad99"},
      {DType::Q5_K, "36cdd7c71b96589249aa3f99d14ac4fa2f8e8c24c651bfd24c03c9d915db1cb6"}, {DType::Q6_K, "ef16a55c484a39ff1992da4cff8e77bbc9782f7855e6dfdd7fd93d0884c6c39d"}, {DType::Q8_K, "bc78a84c60b4155758f12e5bd34e690f649ace25de791fd005a43ad5a1f5784e"}};
  const auto x = test_values(64 * QK_K, 1234, 0.03f);
  for (const auto& [type, sha] : expected) {
    EXPECT_EQ(sha256_hex(quantize_row(type, x)), sha) << dtype_name(type);
  }
}

}  // namespace
}  // namespace okapi::quant
