// AdamW, global-norm clipping and the warmup + cosine learning-rate schedule.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/cpu.hpp"
#include "train/model.hpp"

namespace okapi::train {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;          // decoupled: w -= lr * wd * w
  bool decay_norms_and_embeddings = false;  // false: only Matrix/Output slots decay
};

class AdamW {
 public:
  // `tier` (one of available_isas()) picks the update kernel once: AVX2 from the avx2 tier up,
  // else the scalar loop (the same bits).
  AdamW(const ParameterLayout& layout, const AdamWConfig& config, Isa tier = isa());
  // One update with bias correction for step t (1-based, t = number of updates so far + 1).
  void step(std::span<float> params, std::span<const float> grads, float lr, int64_t t);
  // Moments, for checkpoints (same size as the parameters).
  std::vector<float>& first_moment() { return m_; }
  std::vector<float>& second_moment() { return v_; }

 private:
  AdamWConfig config_;
  bool avx2_;
  std::vector<float> decay_mask_;  // 1 where weight decay applies
  std::vector<float> m_, v_;
};

// Scales grads so their global L2 norm is at most max_norm (no-op when max_norm <= 0); returns
// the norm before clipping. Fixed summation order.
float clip_global_norm(std::span<float> grads, float max_norm);

struct LrSchedule {
  float lr_max = 5e-4f;
  float lr_min = 0.0f;
  int64_t warmup_steps = 0;   // linear from lr_max / warmup to lr_max over steps 1..warmup
  int64_t total_steps = 1;    // cosine from lr_max to lr_min over (warmup, total]
  float at(int64_t step) const;  // step is 1-based
};

}  // namespace okapi::train
