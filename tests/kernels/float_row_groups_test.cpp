// The float formats' row-group kernels (kernels/float_gemm.hpp: F32 / F16 / BF16 weights packed
// into the float GEMM's panels) on every SIMD tier:
//  * prepared activations are the input rounded to the weight's type (F16 / BF16) or unchanged;
//  * every (row, token) result equals, bit for bit, its scalar model: one FMA chain over k in
//    order from zero, for any number of rows (partial last group) and tokens (the decode path,
//    the few-token path, partial micro-kernel heights), so a token is the same alone or inside a batch;
//  * it agrees with the reference vec_dot (double accumulation) within float rounding.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "kernels/float_gemm.hpp"
#include "kernels/format_table.hpp"
#include "support/random_data.hpp"

namespace okapi::kernels {
namespace {

struct Tiered {
  Isa tier;
  DType type;
};

std::vector<Tiered> float_formats() {
  std::vector<Tiered> out;
  for (Isa tier : available_isas()) {
    for (DType type : {DType::F32, DType::F16, DType::BF16}) {
      if (float_row_groups(type, tier).rows > 0) out.push_back({tier, type});
    }
  }
  return out;
}

// The weight's value as the kernel multiplies it, and the activation as it is rounded.
float as_weight_type(DType type, float x) {
  if (type == DType::F16) return fp16_to_fp32(fp32_to_fp16(x));
  if (type == DType::BF16) return bf16_to_fp32(fp32_to_bf16(x));
  return x;
}

struct Problem {
  DType type;
  int64_t n_in, n_out, n_tokens;
  std::vector<uint8_t> w;  // storage layout
  std::vector<float> w_values, x;
  size_t w_row() const { return *row_bytes(type, n_in); }
};

Problem make_problem(DType type, int64_t n_in, int64_t n_out, int64_t n_tokens, uint32_t seed) {
  Problem p{type, n_in, n_out, n_tokens, {}, {}, {}};
  const std::vector<float> w = test::gaussian(static_cast<size_t>(n_in * n_out), seed);
  p.x = test::gaussian(static_cast<size_t>(n_in * n_tokens), seed + 1, 3.0f);
  p.w = quant::quantize_tensor(type, w.data(), std::vector<int64_t>{n_in, n_out}, true);
  p.w_values.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) p.w_values[i] = as_weight_type(type, w[i]);
  return p;
}

struct Packed {
  std::vector<uint8_t> groups, acts;
  size_t a_row = 0;
};

Packed pack_all(const quant::RowGroupKernels& k, const Problem& p) {
  Packed out;
  const size_t g_bytes = k.group_bytes(p.n_in);
  EXPECT_EQ(g_bytes % 64, 0u);
  const int64_t n_groups = (p.n_out + k.rows - 1) / k.rows;
  out.groups.assign(static_cast<size_t>(n_groups) * g_bytes, 0xa5);
  for (int64_t g = 0; g < n_groups; ++g) {
    k.pack(p.w.data() + static_cast<size_t>(g * k.rows) * p.w_row(), p.w_row(), std::min(k.rows, p.n_out - g * k.rows),
           p.n_in, out.groups.data() + static_cast<size_t>(g) * g_bytes);
  }
  out.a_row = k.activation_bytes(p.n_in);
  out.acts.assign(out.a_row * static_cast<size_t>(p.n_tokens), 0x5a);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    k.prepare_activation(p.x.data() + t * p.n_in, p.n_in, out.acts.data() + static_cast<size_t>(t) * out.a_row);
  }
  return out;
}

class FloatRowGroups : public ::testing::TestWithParam<Tiered> {};

TEST_P(FloatRowGroups, PreparedActivationsAreRoundedToTheWeightType) {
  const auto [tier, type] = GetParam();
  const quant::RowGroupKernels k = float_row_groups(type, tier);
  Problem p = make_problem(type, 333, 1, 2, 3);
  // fp16 subnormals, overflow to infinity, ties, signed zero: the SIMD rounding is the scalar one.
  const float specials[] = {1e-6f, -3e-7f, 6e-8f, 70000.0f, -65520.0f, 65519.0f, 1.0f + 0x1p-11f, -0.0f, 1e-40f};
  for (size_t i = 0; i < std::size(specials); ++i) p.x[i * 7] = specials[i];
  const Packed packed = pack_all(k, p);
  const auto* acts = reinterpret_cast<const float*>(packed.acts.data());
  for (size_t i = 0; i < p.x.size(); ++i) ASSERT_EQ(acts[i], as_weight_type(type, p.x[i])) << i;
}

TEST_P(FloatRowGroups, EveryLaneIsOneFmaChainInOrder) {
  const auto [tier, type] = GetParam();
  const quant::RowGroupKernels k = float_row_groups(type, tier);
  const int64_t r = k.rows;
  for (const auto& [n_in, n_out, n_tokens] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 1}, {37, r + 3, 19}, {256, 4 * r, 8}, {100, 5 * r - 1, 2}, {64, 9 * r + 5, 1}, {18, 2 * r, 13},
           // the few-token path (up to the micro-kernel's height), k beyond one 256 block
           {300, 3 * r + 1, 3}, {520, 2 * r, 5}, {260, r, 6}, {257, 2 * r - 7, 4}, {600, r, 7}}) {
    SCOPED_TRACE(::testing::Message() << isa_name(tier) << " " << dtype_name(type) << " n_in " << n_in << " n_out "
                                      << n_out << " tokens " << n_tokens);
    const Problem p = make_problem(type, n_in, n_out, n_tokens, 7);
    const Packed packed = pack_all(k, p);
    const int64_t y_stride = n_out + 3;  // a wider output row: nothing past n_out is written
    std::vector<float> y(static_cast<size_t>(y_stride * n_tokens), -1.0f);
    k.gemm(n_in, packed.groups.data(), n_out, packed.acts.data(), packed.a_row, n_tokens, y.data(), y_stride);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t o = 0; o < n_out; ++o) {
        float acc = 0.0f;
        for (int64_t i = 0; i < n_in; ++i) {
          acc = std::fma(as_weight_type(type, p.x[static_cast<size_t>(t * n_in + i)]),
                         p.w_values[static_cast<size_t>(o * n_in + i)], acc);
        }
        ASSERT_EQ(y[static_cast<size_t>(t * y_stride + o)], acc) << "token " << t << " row " << o;
      }
      for (int64_t o = n_out; o < y_stride; ++o) ASSERT_EQ(y[static_cast<size_t>(t * y_stride + o)], -1.0f);
    }
  }
}

TEST_P(FloatRowGroups, AgreesWithTheReferenceDot) {
  const auto [tier, type] = GetParam();
  const quant::RowGroupKernels k = float_row_groups(type, tier);
  const Problem p = make_problem(type, 2048, 40, 3, 11);
  const Packed packed = pack_all(k, p);
  std::vector<float> y(static_cast<size_t>(p.n_out * p.n_tokens));
  k.gemm(p.n_in, packed.groups.data(), p.n_out, packed.acts.data(), packed.a_row, p.n_tokens, y.data(), p.n_out);
  const quant::Format& f = quant::format(type, Isa::scalar);
  std::vector<uint8_t> act(*row_bytes(f.vec_dot_type, p.n_in));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    quant::format(f.vec_dot_type, Isa::scalar).quantize_ref(p.x.data() + t * p.n_in, act.data(), p.n_in);
    for (int64_t o = 0; o < p.n_out; ++o) {
      const float ref = f.vec_dot_ref(p.n_in, p.w.data() + static_cast<size_t>(o) * p.w_row(), act.data());
      EXPECT_NEAR(y[static_cast<size_t>(t * p.n_out + o)], ref, 1e-4 * (1.0 + std::fabs(ref)))
          << "token " << t << " row " << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, FloatRowGroups, ::testing::ValuesIn(float_formats()),
                         [](const ::testing::TestParamInfo<Tiered>& param_info) {
                           return std::string(isa_name(param_info.param.tier)) + "_" +
                                  std::string(dtype_name(param_info.param.type));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FloatRowGroups);

}  // namespace
}  // namespace okapi::kernels
