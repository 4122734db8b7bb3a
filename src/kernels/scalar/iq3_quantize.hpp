// IQ3_XXS / IQ3_S quantizers, byte-identical to ggml's quantize_iq3_xxs / quantize_iq3_s (with
// importance weights: quantize_*_weighted; without: quantize_xxs / quantize_s, ggml's
// quant_weights == NULL path). Rows of n values, n a multiple of 256.
#pragma once
#include <cstdint>

namespace okapi::quant::iq3 {

void quantize_xxs(const float* x, void* dst, int64_t n);
void quantize_xxs_weighted(const float* x, void* dst, int64_t n, const float* importance);
void quantize_s(const float* x, void* dst, int64_t n);
void quantize_s_weighted(const float* x, void* dst, int64_t n, const float* importance);

}  // namespace okapi::quant::iq3
