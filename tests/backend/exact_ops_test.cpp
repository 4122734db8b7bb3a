// ExactOps (exact mode, seed 000) op by op: each against a float64 formula or the float CpuOps /
// kernels::ref with a stated tolerance, the bit-for-bit independence of thread count and kernel
// choice, and the refusal of a float KV store.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <vector>

#include "backend/cpu_ops.hpp"
#include "backend/exact_islands.hpp"
#include "backend/exact_ops.hpp"
#include "core/cpu.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "kernels/gelu_table.hpp"
#include "kv/exact_store.hpp"
#include "support/random_data.hpp"

namespace okapi::backend {
namespace {

using namespace okapi::model;  // the Ops vocabulary the backends implement

using test::gaussian;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized with the reference dequantizer
  Weight view;
};

TestWeight make_weight(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  TestWeight w;
  const auto original = gaussian(static_cast<size_t>(n_in * n_out), seed, 0.1f);
  const int64_t shape[2] = {n_in, n_out};
  w.bytes = quant::quantize_tensor(type, original.data(), shape, true);
  w.values.resize(original.size());
  quant::dequantize_tensor(type, w.bytes, shape, w.values.data(), true);
  w.view = Weight{"test.weight", type, w.bytes.data(), n_in, n_out};
  return w;
}

// The encoding error bound: with s = max|row| / 32767, every encoded element is within 0.5 s
// (plus the rounding of the scaled value); summed over |w| e_x + |x| e_w + e_w e_x, plus the final
// float rounding of y.
TEST(ExactOps, MatmulWithinTheEncodingErrorBound) {
  for (const DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K}) {
    const int64_t n_in = 256, n_out = 24, n_tokens = 3;
    const TestWeight w = make_weight(type, n_in, n_out, 1);
    const auto x = gaussian(static_cast<size_t>(n_in * n_tokens), 2, 2.0f);
    std::vector<float> y(static_cast<size_t>(n_out * n_tokens));
    ExactOps ops;
    ops.matmul(w.view, x.data(), n_tokens, y.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      double x_max = 0;
      for (int64_t i = 0; i < n_in; ++i) x_max = std::max(x_max, std::fabs(double{x[t * n_in + i]}));
      const double e_x = 0.50001 * x_max / 32767;
      for (int64_t o = 0; o < n_out; ++o) {
        double w_max = 0, want = 0, bound = 0;
        for (int64_t i = 0; i < n_in; ++i) w_max = std::max(w_max, std::fabs(double{w.values[o * n_in + i]}));
        const double e_w = 0.50001 * w_max / 32767;
        for (int64_t i = 0; i < n_in; ++i) {
          const double wi = w.values[o * n_in + i], xi = x[t * n_in + i];
          want += wi * xi;
          bound += std::fabs(wi) * e_x + std::fabs(xi) * e_w + e_w * e_x;
        }
        const double got = y[static_cast<size_t>(t * n_out + o)];
        ASSERT_LE(std::fabs(got - want), bound + std::fabs(want) * 6e-8) << dtype_name(type) << " t " << t << " o " << o;
      }
    }
  }
}

TEST(ExactOps, MatmulIsTheSameBitsForAnyThreadCountAndKernel) {
  const TestWeight w = make_weight(DType::Q8_0, 288, 200, 3);
  const auto x = gaussian(288 * 7, 4);
  std::vector<float> first;
  for (const Isa tier : available_isas()) {
    for (const int threads : {1, 2, 3, 4}) {
      ThreadPool pool(threads);
      ExactOps ops(&pool, tier);
      std::vector<float> y(200 * 7);
      ops.matmul(w.view, x.data(), 7, y.data());
      if (first.empty()) first = y;
      EXPECT_TRUE(same_bits(y, first)) << "threads " << threads << " tier " << isa_name(tier);
    }
  }
  // A token's row does not depend on the batch around it (exact sums: no batch-dependent kernels).
  ExactOps ops;
  std::vector<float> single(200);
  ops.matmul(w.view, x.data() + 5 * 288, 1, single.data());
  EXPECT_EQ(std::memcmp(single.data(), first.data() + 5 * 200, 200 * sizeof(float)), 0);
}

TEST(ExactOps, NonFiniteActivationIsAnErrorNamingTheTensor) {
  const TestWeight w = make_weight(DType::F32, 32, 4, 5);
  std::vector<float> x(32, 1.0f), y(4);
  x[7] = NAN;
  ExactOps ops;
  try {
    ops.matmul(w.view, x.data(), 1, y.data());
    FAIL() << "no error";
  } catch (const okapi::Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.weight"), std::string::npos) << e.what();
  }
}

TEST(ExactOps, RmsNormMatchesReferenceAndFloat64) {
  for (const int64_t n : {1, 7, 64, 288, 4099}) {
    const auto x = gaussian(static_cast<size_t>(n), 6, 3.0f), w = gaussian(static_cast<size_t>(n), 7);
    std::vector<float> got(x.size()), ref(x.size());
    const Weight weight{"norm", DType::F32, w.data(), n, 1};
    ExactOps ops;
    ops.rmsnorm(x.data(), weight, 1, n, 1e-5f, got.data());
    kernels::ref::rmsnorm(x.data(), w.data(), n, 1e-5f, ref.data());
    double sum = 0;
    for (float v : x) sum += double{v} * v;
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(n) + 1e-5);
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = x[i] * scale * w[i];
      EXPECT_NEAR(got[i], want, 6e-8 * std::fabs(want) + 1e-30) << n << " " << i;  // one float rounding
      EXPECT_NEAR(got[i], ref[i], 1e-6 * std::fabs(want) + 1e-30) << n << " " << i;
    }
    auto in_place = x;  // x and y may alias
    ops.rmsnorm(in_place.data(), weight, 1, n, 1e-5f, in_place.data());
    EXPECT_TRUE(same_bits(in_place, got));
  }
}

// Independent float64 RoPE with libm, for plain / freq_scale / freq_factors configurations.
std::vector<double> rope_double(const std::vector<float>& x, int64_t n_heads, int64_t head_dim, int64_t pos,
                                const kernels::RopeConfig& c) {
  std::vector<double> out(x.begin(), x.end());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < c.n_rot / 2; ++i) {
      const double factor = c.freq_factors ? c.freq_factors[i] : 1.0;
      const double angle = double{c.freq_scale} * static_cast<double>(pos) *
                           std::pow(double{c.freq_base}, -2.0 * static_cast<double>(i) / static_cast<double>(c.n_rot)) /
                           factor;
      const int64_t a = h * head_dim + (c.neox ? i : 2 * i), b = h * head_dim + (c.neox ? i + c.n_rot / 2 : 2 * i + 1);
      out[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
      out[b] = x[a] * std::sin(angle) + x[b] * std::cos(angle);
    }
  }
  return out;
}

TEST(ExactOps, RopeMatchesFloat64AndTheFloatKernel) {
  const int64_t n_heads = 3, head_dim = 64;
  const auto factors = std::vector<float>{1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 1.0f, 1.0f, 3.0f, 1.0f, 1.0f, 1.0f, 1.0f,
                                          1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f,
                                          1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  for (const bool neox : {false, true}) {
    for (const int variant : {0, 1, 2}) {
      kernels::RopeConfig c;
      c.neox = neox;
      c.n_rot = variant == 2 ? 32 : 64;  // partial rotation leaves the tail untouched
      c.freq_base = variant == 0 ? 10000.0f : 500000.0f;
      c.freq_scale = variant == 1 ? 0.25f : 1.0f;
      c.freq_factors = variant == 1 ? factors.data() : nullptr;
      for (const int64_t pos : {0, 1, 17, 1000, 100000}) {
        const auto x = gaussian(static_cast<size_t>(n_heads * head_dim), 8);
        auto got = x, ref = x;
        const int32_t p = static_cast<int32_t>(pos);
        ExactOps ops;
        ops.rope(got.data(), 1, n_heads, head_dim, std::span<const int32_t>(&p, 1), c);
        kernels::ref::rope(ref.data(), n_heads, head_dim, pos, c);
        const auto want = rope_double(x, n_heads, head_dim, pos, c);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 2e-7 * (std::fabs(x[i]) + 4)) << neox << variant << " pos " << pos << " " << i;
          // The float kernel's angles drift by ~pos * 2^-24 (float theta), so it agrees only loosely.
          ASSERT_NEAR(got[i], ref[i], 1e-6 + 5e-7 * static_cast<double>(pos)) << neox << variant << " " << i;
        }
      }
    }
  }
}

TEST(ExactOps, RopeYarnFollowsTheFloatKernel) {
  kernels::RopeConfig c;
  c.n_rot = 64;
  c.freq_scale = 0.25f;
  c.ext_factor = 1.0f;
  c.n_ctx_orig = 4096;
  const auto x = gaussian(2 * 64, 9);
  for (const int32_t pos : {3, 300, 5000}) {
    auto got = x, ref = x;
    ExactOps ops;
    ops.rope(got.data(), 1, 2, 64, std::span<const int32_t>(&pos, 1), c);
    kernels::ref::rope(ref.data(), 2, 64, pos, c);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5 + 5e-7 * pos) << pos << " " << i;
  }
}

TEST(ExactOps, GatedActivationsMatchFloat64) {
  const int64_t n = 1000;
  const auto gate = gaussian(n, 10, 3.0f), up = gaussian(n, 11);
  std::vector<float> got(n);
  ExactOps ops;
  for (const Activation act : {Activation::SiLU, Activation::GELU, Activation::GELUF32, Activation::ReLU2}) {
    ops.glu(act, gate.data(), up.data(), 1, n, got.data());
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      double a = 0;
      if (act == Activation::SiLU) a = g / (1.0 + std::exp(-g));
      if (act == Activation::ReLU2) a = g > 0 ? g * g : 0.0;
      if (act == Activation::GELU || act == Activation::GELUF32)
        a = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g)));
      const double want = a * up[i];
      ASSERT_NEAR(got[i], want, 6e-8 * std::fabs(want) + 1e-37) << static_cast<int>(act) << " " << i;
    }
  }
  // Against the float kernels (ggml's fp16 GELU table differs by up to its fp16 rounding).
  std::vector<float> ref(n);
  ops.glu(Activation::SiLU, gate.data(), up.data(), 1, n, got.data());
  kernels::ref::swiglu(gate.data(), up.data(), n, ref.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 1e-6 * (std::fabs(ref[i]) + 1e-3)) << i;
}

TEST(ExactOps, SoftmaxWithScaleAndSoftcapMatchesFloat64) {
  const auto scores = gaussian(300, 12, 20.0f);
  std::vector<double> scratch;
  for (const float softcap : {0.0f, 30.0f}) {
    auto got = scores;
    exact_islands::softmax_scores(got.data(), 300, 0.125f, softcap, nullptr, scratch, isa());
    std::vector<double> want(300);
    double max = -1e300, sum = 0;
    for (size_t i = 0; i < 300; ++i) {
      const double v = scores[i] * 0.125;
      want[i] = softcap > 0 ? softcap * std::tanh(v / softcap) : v;
      max = std::max(max, want[i]);
    }
    for (double& v : want) sum += (v = std::exp(v - max));
    for (size_t i = 0; i < 300; ++i) ASSERT_NEAR(got[i], want[i] / sum, 1e-7 * want[i] / sum + 1e-45) << i;
  }
}

TEST(ExactOps, ElementwiseOpsAreTheFloatOps) {
  const auto a = gaussian(100, 13), b = gaussian(100, 14);
  std::vector<float> got(100), ref(100);
  ExactOps exact_ops;
  CpuOps cpu_ops;
  exact_ops.add(a.data(), b.data(), 100, got.data());
  cpu_ops.add(a.data(), b.data(), 100, ref.data());
  EXPECT_TRUE(same_bits(got, ref));
  exact_ops.mul(a.data(), b.data(), 100, got.data());
  cpu_ops.mul(a.data(), b.data(), 100, ref.data());
  EXPECT_TRUE(same_bits(got, ref));
  exact_ops.scale(a.data(), 0.3f, 100, got.data());
  cpu_ops.scale(a.data(), 0.3f, 100, ref.data());
  EXPECT_TRUE(same_bits(got, ref));
  auto x = a, y = a;
  const Weight bias{"bias", DType::F32, b.data(), 50, 1};
  exact_ops.add_bias(bias, x.data(), 2);
  cpu_ops.add_bias(bias, y.data(), 2);
  EXPECT_TRUE(same_bits(x, y));
}

TEST(ExactOps, GetRowsUsesTheReferenceDequantizer) {
  const TestWeight table = make_weight(DType::Q4_K, 256, 10, 15);
  const std::vector<int32_t> ids{3, 0, 9, 3};
  std::vector<float> got(4 * 256);
  ExactOps ops;
  ops.get_rows(table.view, ids, got.data());
  for (size_t t = 0; t < ids.size(); ++t)
    EXPECT_EQ(std::memcmp(got.data() + t * 256, table.values.data() + ids[t] * 256, 256 * sizeof(float)), 0) << t;
  const std::vector<int32_t> bad{10};
  EXPECT_THROW(ops.get_rows(table.view, bad, got.data()), okapi::Error);
}

}  // namespace
}  // namespace okapi::backend
