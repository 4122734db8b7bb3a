// Element-wise kernels and RoPE: the dispatching (AVX2) versions against the scalar references
// (normalized MSE <= 1e-7, as llama.cpp's test-backend-ops), and the references against plain
// float64 formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/gelu_table.hpp"
#include "kernels/kernels.hpp"
#include "support/random_data.hpp"

namespace okapi::kernels {
namespace {

using test::gaussian;

template <typename A, typename B>
double nmse(const A& got, const B& want) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    err += d * d;
    norm += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return norm == 0.0 ? err : err / norm;
}

const std::vector<int64_t> kSizes{1, 7, 8, 33, 64, 4099};

TEST(RmsNorm, MatchesReferenceAndFloat64) {
  for (int64_t n : kSizes) {
    for (bool with_weight : {false, true}) {
      const auto x = gaussian(static_cast<size_t>(n), 1, 3.0f);
      const auto w = gaussian(static_cast<size_t>(n), 2);
      const float* weight = with_weight ? w.data() : nullptr;
      std::vector<float> ref_y(x.size()), fast_y(x.size());
      ref::rmsnorm(x.data(), weight, n, 1e-5f, ref_y.data());
      rmsnorm(x.data(), weight, n, 1e-5f, fast_y.data());
      EXPECT_LE(nmse(fast_y, ref_y), 1e-7) << n;
      double sum = 0.0;
      for (float v : x) sum += static_cast<double>(v) * v;
      const double scale = 1.0 / std::sqrt(sum / static_cast<double>(n) + 1e-5);
      for (size_t i = 0; i < x.size(); ++i) {
        const double want = x[i] * scale * (weight ? weight[i] : 1.0);
        ASSERT_NEAR(ref_y[i], want, 1e-5 * std::fabs(want) + 1e-7) << n << " " << i;
      }
    }
  }
}

TEST(Softmax, MatchesReferenceAndFloat64) {
  for (int64_t n : kSizes) {
    auto x = gaussian(static_cast<size_t>(n), 3, 4.0f);
    if (n > 8) x[3] = x[n - 1] = -std::numeric_limits<float>::infinity();  // masked entries
    auto ref_y = x, fast_y = x;
    ref::softmax(ref_y.data(), n);
    softmax(fast_y.data(), n);
    EXPECT_LE(nmse(fast_y, ref_y), 1e-7) << n;
    const double max = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (float v : x) sum += std::exp(v - max);
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(x[i] - max) / sum;
      ASSERT_NEAR(ref_y[i], want, 1e-6 * want + 1e-9) << n << " " << i;
    }
    if (n > 8) {
      EXPECT_EQ(fast_y[3], 0.0f);
      EXPECT_EQ(ref_y[3], 0.0f);
    }
  }
}

TEST(GatedActivations, MatchReferenceAndFloat64) {
  for (int64_t n : kSizes) {
    const auto gate = gaussian(static_cast<size_t>(n), 4, 3.0f), up = gaussian(static_cast<size_t>(n), 5);
    std::vector<float> r(gate.size()), f(gate.size());
    std::vector<double> want(gate.size());

    ref::swiglu(gate.data(), up.data(), n, r.data());
    swiglu(gate.data(), up.data(), n, f.data());
    for (size_t i = 0; i < gate.size(); ++i) want[i] = gate[i] / (1.0 + std::exp(-double{gate[i]})) * up[i];
    EXPECT_LE(nmse(f, r), 1e-7);
    EXPECT_LE(nmse(r, want), 1e-12);

    ref::relu2_glu(gate.data(), up.data(), n, r.data());
    relu2_glu(gate.data(), up.data(), n, f.data());
    for (size_t i = 0; i < gate.size(); ++i) want[i] = std::pow(std::max(double{gate[i]}, 0.0), 2) * up[i];
    EXPECT_LE(nmse(f, r), 1e-7);
    EXPECT_LE(nmse(r, want), 1e-12);

    ref::geglu_tanh(gate.data(), up.data(), n, r.data());
    geglu_tanh(gate.data(), up.data(), n, f.data());
    for (size_t i = 0; i < gate.size(); ++i) {
      const double g = gate[i];
      want[i] = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g))) * up[i];
    }
    EXPECT_EQ(f, r);
    EXPECT_LE(nmse(r, want), 1e-5);  // x rounded to fp16 before the lookup, as ggml
  }
}

TEST(GeluTable, MirrorsGgmlFp16Lookup) {
  using detail::gelu_tanh_exact;
  using detail::gelu_tanh_table;
  for (float x : {-3.0f, -0.5f, 0.0f, 0.1f, 1.0f, 2.5f, 9.99f}) {  // fp16-exact inputs or near
    const float rounded = fp16_to_fp32(fp32_to_fp16(x));
    EXPECT_EQ(gelu_tanh_table(x), fp16_to_fp32(fp32_to_fp16(gelu_tanh_exact(rounded)))) << x;
  }
  EXPECT_EQ(gelu_tanh_table(10.0f), 10.0f);
  EXPECT_EQ(gelu_tanh_table(123.5f), 123.5f);
  EXPECT_EQ(gelu_tanh_table(-10.0f), 0.0f);
  EXPECT_NEAR(gelu_tanh_table(1.0f), 0.8412f, 1e-3);
}

TEST(DotAndAxpy, MatchReferenceAndFloat64) {
  for (int64_t n : kSizes) {
    const auto a = gaussian(static_cast<size_t>(n), 6), b = gaussian(static_cast<size_t>(n), 7);
    double want = 0.0, abs_sum = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      want += static_cast<double>(a[i]) * b[i];
      abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    EXPECT_NEAR(ref::dot_f32(a.data(), b.data(), n), want, 1e-6 * abs_sum);
    EXPECT_NEAR(dot_f32(a.data(), b.data(), n), want, 1e-6 * abs_sum);

    auto r = b, f = b;
    ref::axpy(0.37f, a.data(), n, r.data());
    axpy(0.37f, a.data(), n, f.data());
    EXPECT_LE(nmse(f, r), 1e-7);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(r[i], b[i] + 0.37 * a[i], 1e-6);

    // The same with x in fp16 (an F16 V cache row).
    std::vector<uint16_t> a16(a.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = fp32_to_fp16(a[i]);
    auto r16 = b, f16 = b;
    ref::axpy_f16(0.37f, a16.data(), n, r16.data());
    axpy_f16(0.37f, a16.data(), n, f16.data());
    EXPECT_LE(nmse(f16, r16), 1e-7);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(r16[i], b[i] + 0.37 * fp16_to_fp32(a16[i]), 1e-6);
  }
}

// RoPE in double, straight from the definitions (closed-form angles, YaRN ramp).
std::vector<double> rope_double(const std::vector<float>& x, int64_t n_heads, int64_t head_dim, int64_t pos,
                                const RopeConfig& c) {
  std::vector<double> out(x.begin(), x.end());
  const double n_rot = static_cast<double>(c.n_rot);
  double low = 0.0, high = 0.0;
  if (c.ext_factor != 0.0f) {
    auto corr_dim = [&](double rotations) {
      return n_rot * std::log(static_cast<double>(c.n_ctx_orig) / (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(static_cast<double>(c.freq_base)));
    };
    low = std::max(0.0, std::floor(corr_dim(c.beta_fast)));
    high = std::min(n_rot - 1.0, std::ceil(corr_dim(c.beta_slow)));
  }
  for (int64_t i = 0; i < c.n_rot / 2; ++i) {
    const double factor = c.freq_factors ? c.freq_factors[i] : 1.0;
    const double extrap = static_cast<double>(pos) * std::pow(double{c.freq_base}, -2.0 * static_cast<double>(i) / n_rot) / factor;
    double angle = extrap * c.freq_scale, mscale = c.attn_factor;
    if (c.ext_factor != 0.0f) {
      const double ramp = 1.0 - std::clamp((static_cast<double>(i) - low) / std::max(0.001, high - low), 0.0, 1.0);
      const double mix = ramp * c.ext_factor;
      angle = angle * (1.0 - mix) + extrap * mix;
      mscale *= 1.0 + 0.1 * std::log(1.0 / c.freq_scale);
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t a = h * head_dim + (c.neox ? i : 2 * i);
      const int64_t b = h * head_dim + (c.neox ? i + c.n_rot / 2 : 2 * i + 1);
      const double x0 = x[a], x1 = x[b];
      out[a] = (x0 * std::cos(angle) - x1 * std::sin(angle)) * mscale;
      out[b] = (x0 * std::sin(angle) + x1 * std::cos(angle)) * mscale;
    }
  }
  return out;
}

void check_rope(const RopeConfig& c, int64_t head_dim, int64_t pos) {
  SCOPED_TRACE(::testing::Message() << "neox " << c.neox << " n_rot " << c.n_rot << " head_dim " << head_dim
                                    << " pos " << pos << " ext " << c.ext_factor);
  const int64_t n_heads = 3;
  const auto x = gaussian(static_cast<size_t>(n_heads * head_dim), 8);
  auto r = x, f = x;
  ref::rope(r.data(), n_heads, head_dim, pos, c);
  rope(f.data(), n_heads, head_dim, pos, c);
  EXPECT_EQ(f, r);
  const auto want = rope_double(x, n_heads, head_dim, pos, c);
  // Float angles: theta is built by repeated multiplication and cos/sin of angles up to `pos`.
  const double tolerance = 2e-6 * static_cast<double>(pos + 1) + 1e-6;
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(r[i], want[i], tolerance) << i;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t d = c.n_rot; d < head_dim; ++d) EXPECT_EQ(r[h * head_dim + d], x[h * head_dim + d]);
  }
}

TEST(Rope, NormalAndNeoxMatchFloat64) {
  for (bool neox : {false, true}) {
    for (int64_t pos : {0, 1, 37, 500}) {
      RopeConfig c;
      c.neox = neox;
      c.n_rot = 64;
      check_rope(c, 64, pos);
      c.n_rot = 32;  // partial rotation: dims 32.. pass through
      c.freq_base = 1e6f;
      check_rope(c, 48, pos);
    }
  }
}

TEST(Rope, FreqScaleAndFactors) {
  std::vector<float> factors(32);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + static_cast<float>(i) * 0.25f;
  for (bool neox : {false, true}) {
    RopeConfig c;
    c.neox = neox;
    c.n_rot = 64;
    c.freq_base = 500000.0f;
    c.freq_scale = 0.5f;
    c.freq_factors = factors.data();
    check_rope(c, 64, 123);
  }
}

TEST(Rope, Yarn) {
  for (bool neox : {false, true}) {
    RopeConfig c;
    c.neox = neox;
    c.n_rot = 128;
    c.freq_base = 10000.0f;
    c.freq_scale = 0.25f;
    c.ext_factor = 1.0f;
    c.attn_factor = 1.0f;
    c.beta_fast = 32.0f;
    c.beta_slow = 1.0f;
    c.n_ctx_orig = 4096;
    check_rope(c, 128, 300);
    c.ext_factor = 0.5f;
    c.attn_factor = 0.9f;
    check_rope(c, 128, 77);
  }
}

TEST(Rope, RejectsBadRotationCount) {
  std::vector<float> x(64);
  RopeConfig c;
  c.n_rot = 65;
  EXPECT_THROW(rope(x.data(), 1, 64, 0, c), Error);
  c.n_rot = 3;
  EXPECT_THROW(rope(x.data(), 1, 64, 0, c), Error);
  c.n_rot = 0;
  EXPECT_THROW(ref::rope(x.data(), 1, 64, 0, c), Error);
}

}  // namespace
}  // namespace okapi::kernels
