// The format table's row-group kernels (quant.hpp RowGroupKernels: weights repacked into groups of
// interleaved rows, one kernel for decode and prefill), on every tier this CPU runs that has them:
//  * prepared activations hold the reference Q8_0 quantizer's levels and scales;
//  * every (row, token) result equals, bit for bit, a scalar model of the kernels' arithmetic
//    (per block in order: acc = fma(d_w * d_a, float(exact integer dot), acc)), for any number
//    of rows (partial last group) and tokens (partial token groups), extreme levels included;
//  * and agrees with the reference vec_dot within the tolerance of a reordered float sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "quant/blocks.hpp"
#include "quant/quant.hpp"
#include "support/random_data.hpp"

namespace okapi::quant {
namespace {

using test::gaussian;

struct Tiered {
  Isa tier;
  DType type;
};

// Every (tier, format) pair with row-group kernels.
std::vector<Tiered> row_group_formats() {
  std::vector<Tiered> out;
  for (Isa tier : available_isas()) {
    for (DType type : supported_types()) {
      if (format(type, tier).row_groups.rows > 0) out.push_back({tier, type});
    }
  }
  return out;
}

// The signed level j of a weight block (Q8_0 or Q4_0) and its fp16 scale.
int weight_level(DType type, const uint8_t* row, int64_t j) {
  if (type == DType::Q8_0) {
    const auto& b = reinterpret_cast<const block_q8_0*>(row)[j / QK8_0];
    return b.qs[j % QK8_0];
  }
  const auto& b = reinterpret_cast<const block_q4_0*>(row)[j / QK4_0];
  const int i = static_cast<int>(j % QK4_0);
  return (i < 16 ? b.qs[i] & 0x0f : b.qs[i - 16] >> 4) - 8;
}
uint16_t weight_scale(DType type, const uint8_t* row, int64_t block) {
  if (type == DType::Q8_0) return reinterpret_cast<const block_q8_0*>(row)[block].d;
  return reinterpret_cast<const block_q4_0*>(row)[block].d;
}

struct Problem {
  int64_t n_in = 0, n_out = 0, n_tokens = 0;
  std::vector<uint8_t> w;       // n_out rows in storage layout
  std::vector<block_q8_0> act;  // n_tokens rows of Q8_0 (reference quantizer)
  std::vector<float> x;
};

Problem make_problem(DType type, int64_t n_in, int64_t n_out, int64_t n_tokens, uint32_t seed, bool extreme) {
  Problem p{n_in, n_out, n_tokens, {}, {}, {}};
  std::vector<float> w = gaussian(static_cast<size_t>(n_in * n_out), seed);
  p.x = gaussian(static_cast<size_t>(n_in * n_tokens), seed + 1, 3.0f);
  if (extreme) {
    // Levels at their ends: Q8_0 weights -128 (a block of -1.0 with one -127/128 outlier is not
    // needed: the quantizer never writes -128, so write the bytes), activations +-127.
    for (size_t i = 0; i < p.x.size(); ++i) p.x[i] = (i % 3 == 0) ? -5.0f : 5.0f;
  }
  p.w = quantize_tensor(type, w.data(), std::vector<int64_t>{n_in, n_out}, true);
  if (extreme && type == DType::Q8_0) {
    for (size_t b = 0; b < p.w.size() / sizeof(block_q8_0); ++b) {
      auto* blk = reinterpret_cast<block_q8_0*>(p.w.data()) + b;
      std::memset(blk->qs, 0x80, sizeof(blk->qs));
    }
  }
  if (extreme && type == DType::Q4_0) {
    for (size_t b = 0; b < p.w.size() / sizeof(block_q4_0); ++b) {
      auto* blk = reinterpret_cast<block_q4_0*>(p.w.data()) + b;
      std::memset(blk->qs, (b % 2) ? 0x00 : 0xff, sizeof(blk->qs));
    }
  }
  p.act.resize(static_cast<size_t>(n_in / QK8_0 * n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) {
    format(DType::Q8_0, Isa::scalar).quantize_ref(p.x.data() + t * n_in, p.act.data() + t * (n_in / QK8_0), n_in);
  }
  return p;
}

// The scalar model of one (row, token) lane.
float model_dot(DType type, const Problem& p, int64_t o, int64_t t) {
  const size_t w_row = *row_bytes(type, p.n_in);
  const uint8_t* row = p.w.data() + static_cast<size_t>(o) * w_row;
  const block_q8_0* a = p.act.data() + t * (p.n_in / QK8_0);
  float acc = 0.0f;
  for (int64_t b = 0; b < p.n_in / QK8_0; ++b) {
    int32_t sum = 0;
    for (int64_t j = 0; j < QK8_0; ++j) sum += weight_level(type, row, b * QK8_0 + j) * a[b].qs[j];
    const float d = fp16_to_fp32(weight_scale(type, row, b)) * fp16_to_fp32(a[b].d);
    acc = std::fma(d, static_cast<float>(sum), acc);
  }
  return acc;
}

struct Packed {
  std::vector<uint8_t> groups, acts;
  size_t a_row = 0;
};

Packed pack_all(const RowGroupKernels& k, DType type, const Problem& p) {
  Packed out;
  const size_t w_row = *row_bytes(type, p.n_in), g_bytes = k.group_bytes(p.n_in);
  EXPECT_EQ(g_bytes % 64, 0u);
  const int64_t n_groups = (p.n_out + k.rows - 1) / k.rows;
  out.groups.assign(static_cast<size_t>(n_groups) * g_bytes, 0xa5);
  for (int64_t g = 0; g < n_groups; ++g) {
    k.pack(p.w.data() + static_cast<size_t>(g * k.rows) * w_row, w_row, std::min(k.rows, p.n_out - g * k.rows), p.n_in,
           out.groups.data() + static_cast<size_t>(g) * g_bytes);
  }
  out.a_row = k.activation_bytes(p.n_in);
  out.acts.assign(out.a_row * static_cast<size_t>(p.n_tokens), 0x5a);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    k.prepare_activation(p.x.data() + t * p.n_in, p.n_in, out.acts.data() + static_cast<size_t>(t) * out.a_row);
  }
  return out;
}

class RowGroups : public ::testing::TestWithParam<Tiered> {};

TEST_P(RowGroups, PreparedActivationsAreTheReferenceQuantization) {
  const auto [tier, type] = GetParam();
  const RowGroupKernels& k = format(type, tier).row_groups;
  Problem p = make_problem(type, 544, 1, 5, 3, false);
  // Token 0: rounding ties. Blocks whose max|x| is 127 have d = 1, so x = +-(k + 0.5) are exact
  // halfway cases (the reference rounds them away from zero); one block is all zeros (d = 0),
  // one has a NaN (skipped by the max), one is tiny (subnormal d).
  for (int64_t i = 0; i < 544; ++i) {
    const int64_t b = i / QK8_0, j = i % QK8_0;
    const float tie = (j % 2 ? -1.0f : 1.0f) * (static_cast<float>(j) + 0.5f);
    p.x[static_cast<size_t>(i)] = j == 0 ? 127.0f : tie;
    if (b == 1) p.x[static_cast<size_t>(i)] = 0.0f;
    if (b == 3) p.x[static_cast<size_t>(i)] *= 1e-40f;
  }
  p.x[2 * QK8_0 + 5] = std::numeric_limits<float>::quiet_NaN();
  p.x[2 * QK8_0 + 6] = 0.0f;
  format(DType::Q8_0, Isa::scalar).quantize_ref(p.x.data(), p.act.data(), p.n_in);
  p.act[2].qs[5] = 0;  // the reference's level for the NaN is undefined (a NaN cast to int)
  const Packed packed = pack_all(k, type, p);
  const int64_t nb = p.n_in / QK8_0;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const uint8_t* row = packed.acts.data() + static_cast<size_t>(t) * packed.a_row;
    for (int64_t b = 0; b < nb; ++b) {
      const block_q8_0& ref = p.act[static_cast<size_t>(t * nb + b)];
      std::vector<int8_t> got(row + b * QK8_0, row + (b + 1) * QK8_0);
      if (t == 0 && b == 2) got[5] = 0;
      ASSERT_EQ(std::memcmp(got.data(), ref.qs, QK8_0), 0) << "token " << t << " block " << b;
      float d;
      std::memcpy(&d, row + nb * QK8_0 + b * 4, 4);
      ASSERT_EQ(d, fp16_to_fp32(ref.d)) << "token " << t << " block " << b;
      int32_t offset, sum = 0;
      std::memcpy(&offset, row + nb * (QK8_0 + 4) + b * 4, 4);
      for (int8_t q : got) sum += q;
      ASSERT_EQ(offset, -(type == DType::Q8_0 ? 128 : 8) * sum) << "token " << t << " block " << b;
    }
  }
}

TEST_P(RowGroups, EveryLaneEqualsTheScalarModelBitForBit) {
  const auto [tier, type] = GetParam();
  const RowGroupKernels& k = format(type, tier).row_groups;
  for (bool extreme : {false, true}) {
    for (const auto& [n_in, n_out, n_tokens] : std::vector<std::array<int64_t, 3>>{
             {32, 1, 1}, {544, 37, 19}, {256, 16, 8}, {96, 33, 9}, {4096, 5, 2}}) {
      SCOPED_TRACE(::testing::Message() << isa_name(tier) << " " << dtype_name(type) << " n_in " << n_in << " n_out "
                                        << n_out << " tokens " << n_tokens << (extreme ? " extreme" : ""));
      const Problem p = make_problem(type, n_in, n_out, n_tokens, 7, extreme);
      const Packed packed = pack_all(k, type, p);
      const int64_t y_stride = n_out + 3;  // a wider output row: nothing past n_out is written
      std::vector<float> y(static_cast<size_t>(y_stride * n_tokens), -1.0f);
      k.gemm(n_in, packed.groups.data(), n_out, packed.acts.data(), packed.a_row, n_tokens, y.data(), y_stride);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < n_out; ++o) {
          ASSERT_EQ(y[static_cast<size_t>(t * y_stride + o)], model_dot(type, p, o, t)) << "token " << t << " row " << o;
        }
        for (int64_t o = n_out; o < y_stride; ++o) ASSERT_EQ(y[static_cast<size_t>(t * y_stride + o)], -1.0f);
      }
    }
  }
}

TEST_P(RowGroups, AgreesWithTheReferenceDot) {
  const auto [tier, type] = GetParam();
  const RowGroupKernels& k = format(type, tier).row_groups;
  const Problem p = make_problem(type, 2048, 40, 3, 11, false);
  const Packed packed = pack_all(k, type, p);
  std::vector<float> y(static_cast<size_t>(p.n_out * p.n_tokens));
  k.gemm(p.n_in, packed.groups.data(), p.n_out, packed.acts.data(), packed.a_row, p.n_tokens, y.data(), p.n_out);
  const size_t w_row = *row_bytes(type, p.n_in);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t o = 0; o < p.n_out; ++o) {
      const float ref = format(type, Isa::scalar)
                            .vec_dot_ref(p.n_in, p.w.data() + static_cast<size_t>(o) * w_row, p.act.data() + t * (p.n_in / QK8_0));
      EXPECT_NEAR(y[static_cast<size_t>(t * p.n_out + o)], ref, 1e-4 * (1.0 + std::fabs(ref))) << "token " << t << " row " << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, RowGroups, ::testing::ValuesIn(row_group_formats()),
                         [](const ::testing::TestParamInfo<Tiered>& param_info) {
                           return std::string(isa_name(param_info.param.tier)) + "_" + std::string(dtype_name(param_info.param.type));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RowGroups);

// Which formats have row-group kernels where: none below avx512; Q8_0 and Q4_0 on avx512.
TEST(RowGroupTable, InstalledOnTheAvx512TierOnly) {
  for (Isa tier : available_isas()) {
    for (DType type : supported_types()) {
      const bool expected = tier == Isa::avx512 && (type == DType::Q8_0 || type == DType::Q4_0);
      EXPECT_EQ(format(type, tier).row_groups.rows > 0, expected) << isa_name(tier) << " " << dtype_name(type);
    }
  }
}

}  // namespace
}  // namespace okapi::quant
