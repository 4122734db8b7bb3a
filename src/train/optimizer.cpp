// AdamW, global-norm clipping, warmup + cosine schedule (optimizer.hpp).
#include "train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "train/adamw_update.hpp"
#include "train/avx2/adamw.hpp"

namespace okapi::train {

AdamW::AdamW(const ParameterLayout& layout, const AdamWConfig& config, Isa tier)
    : config_(config), avx2_(tier >= Isa::avx2), decay_mask_(layout.total(), 0.0f), m_(layout.total(), 0.0f), v_(layout.total(), 0.0f) {
  for (const TensorSlot& s : layout.slots()) {
    const bool decays = s.role == TensorRole::Matrix || s.role == TensorRole::Output ||
                        config.decay_norms_and_embeddings;
    std::fill(decay_mask_.begin() + static_cast<std::ptrdiff_t>(s.offset),
              decay_mask_.begin() + static_cast<std::ptrdiff_t>(s.offset + s.size()), decays ? 1.0f : 0.0f);
  }
}

void AdamW::step(std::span<float> params, std::span<const float> grads, float lr, int64_t t) {
  if (params.size() != m_.size() || grads.size() != m_.size()) {
    throw_error("AdamW: {} parameters and {} gradients for a layout of {}", params.size(), grads.size(), m_.size());
  }
  if (t < 1) throw_error("AdamW: step {} must be at least 1", t);
  // Bias corrections in double, folded into two float factors: m_hat = m * c1, v_hat = v * c2.
  const double t_d = static_cast<double>(t);
  AdamWUpdate u{};
  u.b1 = config_.beta1;
  u.one_minus_b1 = 1.0f - config_.beta1;
  u.b2 = config_.beta2;
  u.one_minus_b2 = 1.0f - config_.beta2;
  u.c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config_.beta1), t_d)));
  u.c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config_.beta2), t_d)));
  u.eps = config_.eps;
  u.lr = lr;
  u.decay = lr * config_.weight_decay;
  if (avx2_) {
    avx2::adamw_update(u, m_.size(), params.data(), grads.data(), m_.data(), v_.data(), decay_mask_.data());
  } else {
    adamw_update_scalar(u, m_.size(), params.data(), grads.data(), m_.data(), v_.data(), decay_mask_.data());
  }
}

void adamw_update_scalar(const AdamWUpdate& u, size_t n, float* params, const float* grads, float* m, float* v,
                         const float* mask) {
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = u.b1 * m[i] + u.one_minus_b1 * g;
    v[i] = u.b2 * v[i] + u.one_minus_b2 * (g * g);
    const float update = (m[i] * u.c1) / (std::sqrt(v[i] * u.c2) + u.eps);
    params[i] = (params[i] - (u.decay * mask[i]) * params[i]) - u.lr * update;
  }
}

float clip_global_norm(std::span<float> grads, float max_norm) {
  // Four interleaved double accumulators (element i goes to i % 4), added at the end: a fixed
  // order on every machine, and four independent add chains instead of one.
  double acc[4] = {0, 0, 0, 0};
  const size_t n = grads.size();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (size_t j = 0; j < 4; ++j) acc[j] += static_cast<double>(grads[i + j]) * static_cast<double>(grads[i + j]);
  }
  for (size_t j = 0; i + j < n; ++j) acc[j] += static_cast<double>(grads[i + j]) * static_cast<double>(grads[i + j]);
  const double norm = std::sqrt((acc[0] + acc[1]) + (acc[2] + acc[3]));
  if (max_norm > 0.0f && std::isfinite(norm) && norm > static_cast<double>(max_norm)) {
    const auto scale = static_cast<float>(static_cast<double>(max_norm) / norm);
    for (float& g : grads) g *= scale;
  }
  return static_cast<float>(norm);
}

float LrSchedule::at(int64_t step) const {
  const int64_t s = std::max<int64_t>(step, 1);
  if (warmup_steps > 0 && s <= warmup_steps) {
    return static_cast<float>(static_cast<double>(lr_max) * static_cast<double>(s) / static_cast<double>(warmup_steps));
  }
  if (s >= total_steps) return lr_min;  // the end of the cosine, and after it
  const double progress =
      static_cast<double>(s - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(static_cast<double>(lr_min) + cosine * static_cast<double>(lr_max - lr_min));
}

}  // namespace okapi::train
