// Pieces shared by the scalar block formats of the legacy and ternary families.
#pragma once
#include <cstdint>

namespace okapi::quant::detail {

// The multiplier ggml's quantizers scale values by: 1/d, or 0 for an all-zero block (d == 0).
inline float inverse_scale(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// The loop of ggml's scalar block dot products. Per block i, in order: `decode(w[i], levels)`
// writes the kBlockSize integer levels of the weight block, their exact integer dot product with
// the activation block's int8 quants `a[i].qs` is `sumi`, and `term(w[i], a[i], sumi)` is the float
// added to the sum. Each format keeps its own float expression (and rounding) in `term`.
template <typename WeightBlock, typename ActBlock, int kBlockSize, typename Decode, typename Term>
float block_dot(int64_t n, const void* w, const void* a, Decode decode, Term term) {
  const auto* x = static_cast<const WeightBlock*>(w);
  const auto* y = static_cast<const ActBlock*>(a);
  int levels[kBlockSize];
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kBlockSize; ++i) {
    decode(x[i], levels);
    int sumi = 0;
    for (int j = 0; j < kBlockSize; ++j) sumi += levels[j] * y[i].qs[j];
    sum += term(x[i], y[i], sumi);
  }
  return sum;
}

}  // namespace okapi::quant::detail
