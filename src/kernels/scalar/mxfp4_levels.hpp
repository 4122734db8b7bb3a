// MXFP4's codebook and scale, shared by its reference and SIMD kernels. Data and declarations only
// (no inline code): the SIMD tiers' files include it too.
#pragma once
#include <cstdint>

namespace okapi::quant::detail {

// ggml's kvalues_mxfp4: the E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 -> 0..12), sign in bit 3.
inline constexpr int8_t kMxfp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ggml_e8m0_to_fp32_half: 2^(e - 128), half the E8M0 scale (the levels are doubled); e < 2 gives
// the subnormals 2^-128, 2^-127.
float mxfp4_half_scale(uint8_t e);  // scalar/mxfp4.cpp

}  // namespace okapi::quant::detail
