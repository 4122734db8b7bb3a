// RoPE with ggml_rope_ext semantics (ggml-cpu's rope_f32): per-pair angles are built by repeated
// float multiplication theta *= theta_scale, YaRN mixes interpolated and extrapolated angles over
// a ramp between the correction dims, and cos/sin are taken in float and scaled by mscale.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.hpp"
#include "kernels/kernels.hpp"

namespace okapi::kernels::ref {
namespace {

// ggml_rope_yarn_corr_dim: the dim at which a wavelength spans n_ctx_orig / n_rot rotations.
float yarn_corr_dim(int64_t n_dims, int64_t n_ctx_orig, float n_rotations, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rotations * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

float yarn_ramp(float low, float high, int64_t i0) {
  const float y = (static_cast<float>(i0 / 2) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

void check(int64_t head_dim, const RopeConfig& c) {
  if (c.n_rot <= 0 || c.n_rot > head_dim || c.n_rot % 2 != 0) {
    throw_error("rope: n_rot {} must be even and in (0, head_dim {}]", c.n_rot, head_dim);
  }
}

}  // namespace

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t position, const RopeConfig& c) {
  check(head_dim, c);
  const int64_t n_rot = c.n_rot;
  const float theta_scale = std::pow(c.freq_base, -2.0f / static_cast<float>(n_rot));
  float corr_low = 0.0f, corr_high = 0.0f;
  if (c.ext_factor != 0.0f) {
    const float start = std::floor(yarn_corr_dim(n_rot, c.n_ctx_orig, c.beta_fast, c.freq_base));
    const float end = std::ceil(yarn_corr_dim(n_rot, c.n_ctx_orig, c.beta_slow, c.freq_base));
    corr_low = std::max(0.0f, start);
    corr_high = std::min(static_cast<float>(n_rot - 1), end);
  }
  // cos/sin per pair, shared by all heads (ggml_rope_cache_init), in this thread's buffer (grown
  // once: rope runs per token in the decode loop, which allocates nothing).
  thread_local std::vector<float> cos_sin;
  if (cos_sin.size() < static_cast<size_t>(n_rot)) cos_sin.resize(static_cast<size_t>(n_rot));
  float theta = static_cast<float>(position);
  for (int64_t i0 = 0; i0 < n_rot; i0 += 2) {
    const float factor = c.freq_factors ? c.freq_factors[i0 / 2] : 1.0f;
    const float theta_extrap = theta / factor;
    const float theta_interp = c.freq_scale * theta_extrap;
    float angle = theta_interp, mscale = c.attn_factor;
    if (c.ext_factor != 0.0f) {
      const float mix = yarn_ramp(corr_low, corr_high, i0) * c.ext_factor;
      angle = theta_interp * (1.0f - mix) + theta_extrap * mix;
      mscale *= 1.0f + 0.1f * std::log(1.0f / c.freq_scale);
    }
    cos_sin[static_cast<size_t>(i0)] = std::cos(angle) * mscale;
    cos_sin[static_cast<size_t>(i0 + 1)] = std::sin(angle) * mscale;
    theta *= theta_scale;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i0 = 0; i0 < n_rot; i0 += 2) {
      const float cos_t = cos_sin[static_cast<size_t>(i0)], sin_t = cos_sin[static_cast<size_t>(i0 + 1)];
      // normal: adjacent pair (i0, i0+1); NEOX: (i0/2, i0/2 + n_rot/2).
      const int64_t a = c.neox ? i0 / 2 : i0;
      const int64_t b = c.neox ? i0 / 2 + n_rot / 2 : i0 + 1;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * cos_t - x1 * sin_t;
      head[b] = x0 * sin_t + x1 * cos_t;
    }
  }
}

}  // namespace okapi::kernels::ref
