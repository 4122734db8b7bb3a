#include "backend/exact_islands.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "exact/detmath.hpp"

namespace okapi::backend::exact_islands {

namespace det = exact::det;

void rmsnorm_row(const float* x, const float* weight, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  // sqrt is an IEEE basic operation (correctly rounded), so it needs no det:: version.
  const double scale = 1.0 / __builtin_sqrt(sum / static_cast<double>(n) + static_cast<double>(eps));
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]) * scale;
    y[i] = static_cast<float>(weight ? v * static_cast<double>(weight[i]) : v);
  }
}

namespace {

// ggml_rope_yarn_corr_dim in double with det::log.
double yarn_corr_dim(int64_t n_dims, int64_t n_ctx_orig, double n_rotations, double base) {
  return static_cast<double>(n_dims) *
         det::log(static_cast<double>(n_ctx_orig) / (n_rotations * 2.0 * std::numbers::pi)) / (2.0 * det::log(base));
}

double yarn_ramp(double low, double high, int64_t i0) {
  const double y = (static_cast<double>(i0 / 2) - low) / std::max(0.001, high - low);
  return 1.0 - std::min(1.0, std::max(0.0, y));
}

}  // namespace

void rope_token(float* x, int64_t n_heads, int64_t head_dim, int64_t position, const kernels::RopeConfig& c) {
  const int64_t n_rot = c.n_rot;
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0)
    throw_error("rope: n_rot {} must be even and in (0, head_dim {}]", n_rot, head_dim);
  const double base = c.freq_base;
  if (!(base > 0.0)) throw_error("rope: freq_base must be positive, got {}", c.freq_base);
  const double theta_scale = det::pow(base, -2.0 / static_cast<double>(n_rot));
  double corr_low = 0.0, corr_high = 0.0;
  if (c.ext_factor != 0.0f) {
    if (c.n_ctx_orig <= 0) throw_error("rope: YaRN needs n_ctx_orig > 0, got {}", c.n_ctx_orig);
    corr_low = std::max(0.0, std::floor(yarn_corr_dim(n_rot, c.n_ctx_orig, c.beta_fast, base)));
    corr_high = std::min(static_cast<double>(n_rot - 1), std::ceil(yarn_corr_dim(n_rot, c.n_ctx_orig, c.beta_slow, base)));
  }
  double cos_sin[2 * 512];
  std::vector<double> big;
  double* table = cos_sin;
  if (n_rot > 512) {
    big.resize(static_cast<size_t>(2 * n_rot));
    table = big.data();
  }
  double theta = static_cast<double>(position);
  for (int64_t i0 = 0; i0 < n_rot; i0 += 2) {
    const double factor = c.freq_factors ? static_cast<double>(c.freq_factors[i0 / 2]) : 1.0;
    const double theta_extrap = theta / factor;
    const double theta_interp = static_cast<double>(c.freq_scale) * theta_extrap;
    double angle = theta_interp, mscale = c.attn_factor;
    if (c.ext_factor != 0.0f) {
      const double mix = yarn_ramp(corr_low, corr_high, i0) * static_cast<double>(c.ext_factor);
      angle = theta_interp * (1.0 - mix) + theta_extrap * mix;
      mscale *= 1.0 + 0.1 * det::log(1.0 / static_cast<double>(c.freq_scale));
    }
    table[i0] = det::cos(angle) * mscale;
    table[i0 + 1] = det::sin(angle) * mscale;
    theta *= theta_scale;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i0 = 0; i0 < n_rot; i0 += 2) {
      const double cos_t = table[i0], sin_t = table[i0 + 1];
      const int64_t a = c.neox ? i0 / 2 : i0;
      const int64_t b = c.neox ? i0 / 2 + n_rot / 2 : i0 + 1;
      const double x0 = head[a], x1 = head[b];
      head[a] = static_cast<float>(x0 * cos_t - x1 * sin_t);
      head[b] = static_cast<float>(x0 * sin_t + x1 * cos_t);
    }
  }
}

void softmax_scores(float* scores, int64_t n, float scale, float softcap, const float* sink,
                    std::vector<double>& scratch, Isa tier) {
  if (n <= 0) return;
  // The sink, when there is one, is the last entry: in the max and the sum, never written out.
  scratch.resize(static_cast<size_t>(n + (sink ? 1 : 0)));
  const double s = scale, cap = softcap;
  double max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(scores[i]) * s;
    scratch[static_cast<size_t>(i)] = cap > 0.0 ? cap * det::tanh(v / cap) : v;
    max = std::max(max, scratch[static_cast<size_t>(i)]);
  }
  if (sink) max = std::max(max, scratch[static_cast<size_t>(n)] = *sink);
  for (double& v : scratch) v -= max;
  det::exp_in_place(scratch.data(), static_cast<int64_t>(scratch.size()), tier);
  double sum = 0.0;
  for (const double v : scratch) sum += v;
  const double inverse = 1.0 / sum;
  for (int64_t i = 0; i < n; ++i) scores[i] = static_cast<float>(scratch[static_cast<size_t>(i)] * inverse);
}

void glu(model::Activation act, const float* gate, const float* up, int64_t n, float* out, Isa tier) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
  constexpr int64_t kBlock = 64;
  double e[kBlock];  // SiLU: exp(-g) of a block, through the batch exp
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t count = std::min(kBlock, n - begin);
    if (act == model::Activation::SiLU) {
      for (int64_t i = 0; i < count; ++i) e[i] = -static_cast<double>(gate[begin + i]);
      det::exp_in_place(e, count, tier);
    }
    for (int64_t i = 0; i < count; ++i) {
      const double g = gate[begin + i], u = up[begin + i];
      double a = 0.0;
      switch (act) {
        case model::Activation::SiLU: a = g / (1.0 + e[i]); break;
        case model::Activation::GELU:
        case model::Activation::GELUF32: a = 0.5 * g * (1.0 + det::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g))); break;
        case model::Activation::ReLU2: a = g > 0.0 ? g * g : 0.0; break;
      }
      out[begin + i] = static_cast<float>(a * u);
    }
  }
}

}  // namespace okapi::backend::exact_islands
