// Q4_K and Q5_K share their scale structure: 8 sub-blocks of 32, each with a 6-bit scale and a
// 6-bit min (12 packed bytes), times the fp16 super-block d and dmin.
#pragma once
#include <cstdint>

#include "quant/scalar/kquant_search.hpp"

namespace okapi::quant::kquant {

struct K4Scales {
  uint16_t d = 0;
  uint16_t dmin = 0;
  uint8_t packed[12] = {};
};

// Levels L[0..255] in [0, nmax] for one super-block x, and the scales to store (the first half of
// quantize_row_q4_K_ref / quantize_row_q5_K_ref).
K4Scales quantize_k4_super_block(const float* x, int nmax, const ScaleSearch& search, uint8_t* L);

}  // namespace okapi::quant::kquant
