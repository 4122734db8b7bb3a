// Q8_K: the activation format of the k-quant dot products. One float scale per 256 values, int8
// levels, and the sums of each 16 levels (bsums) so the k-quant mins cost one multiply per group.
#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include <cmath>
#include <cstring>

#include "kernels/scalar/kquant_rows.hpp"
#include "kernels/scalar/kquant_search.hpp"

namespace okapi::quant::kquant {
namespace {

void quantize_block_q8(const float* x, block_q8_K& y) {
  float max = 0.0f;  // signed value of the largest |x|; the first one wins ties
  float amax = 0.0f;
  for (int j = 0; j < QK_K; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    // ggml leaves bsums untouched here; zero is what they must hold.
    std::memset(&y, 0, sizeof(y));
    return;
  }
  // -127 (not -128) keeps every level in [-127, 127], which the SIMD kernels rely on.
  const float iscale = -127.0f / max;
  for (int j = 0; j < QK_K; ++j) {
    const int v = nearest_int(iscale * x[j]);
    y.qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
  }
  for (int g = 0; g < QK_K / 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += y.qs[16 * g + l];
    y.bsums[g] = static_cast<int16_t>(sum);
  }
  y.d = 1.0f / iscale;
}

}  // namespace

void dequantize_q8_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q8_K*>(src);
  const int64_t nb = super_blocks(n, DType::Q8_K);
  for (int64_t i = 0; i < nb; ++i) {
    for (int j = 0; j < QK_K; ++j) *dst++ = blocks[i].d * static_cast<float>(blocks[i].qs[j]);
  }
}

void quantize_q8_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q8_K*>(dst);
  const int64_t nb = super_blocks(n, DType::Q8_K);
  for (int64_t i = 0; i < nb; ++i) quantize_block_q8(src + i * QK_K, blocks[i]);
}

}  // namespace okapi::quant::kquant
