// The per-element AdamW update, shared by the scalar and AVX2 paths (internal to src/train):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = (p - (decay * mask) * p) - lr * ((m * c1) / (sqrt(v * c2) + eps))
// with c1, c2 the bias corrections 1 / (1 - beta^t) and decay = lr * weight_decay.
#pragma once
#include <cstddef>

namespace okapi::train {

struct AdamWUpdate {
  float b1, one_minus_b1, b2, one_minus_b2, c1, c2, eps, lr, decay;
};

// Scalar reference over [0, n); AdamW::step uses the AVX2 version when the CPU has it.
void adamw_update_scalar(const AdamWUpdate& u, size_t n, float* params, const float* grads, float* m, float* v,
                         const float* mask);

}  // namespace okapi::train
