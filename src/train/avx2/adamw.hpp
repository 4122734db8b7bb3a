// The AdamW element update with AVX2 (8 lanes, no FMA: the same roundings as the scalar loop in
// optimizer.cpp, so both give bit-identical parameters). Only after cpu_features().use_avx2().
#pragma once
#include <cstddef>

#include "train/adamw_update.hpp"

namespace okapi::train::avx2 {

void adamw_update(const AdamWUpdate& u, size_t n, float* params, const float* grads, float* m, float* v,
                  const float* mask);

}  // namespace okapi::train::avx2
