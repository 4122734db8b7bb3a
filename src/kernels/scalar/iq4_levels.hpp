// The IQ4 family's codebook and block quantizer, shared by IQ4_NL (one block of 32 per scale) and
// IQ4_XS (super-blocks of 256: eight blocks of 32 with 6-bit block scales under one fp16 scale).
// Data and declarations only (no inline code): the SIMD tiers' files include it too.
#pragma once
#include <cstdint>

namespace okapi::quant::detail {

// ggml's kvalues_iq4nl: the 16 levels a 4-bit index selects.
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The IQ4_XS block scale of block ib (0..7) of a super-block: 4 low bits from scales_l, 2 high
// bits from scales_h, minus 32 (-32..31).
int iq4_xs_block_scale(const uint8_t* scales_l, uint16_t scales_h, int ib);  // scalar/iq4_xs.cpp

// ggml's quantize_row_iq4_nl_impl with ntry = 7 (as quantize_iq4_nl and quantize_iq4_xs call it),
// bit for bit: `n` values at x (32: IQ4_NL, 256: IQ4_XS) into the fp16 scale *d, the nibbles qs
// (n / 2 bytes) and, for n = 256, the packed 6-bit block scales (scales_h, scales_l; unused for
// n = 32). `importance`: n per-column weights, or null (weights x^2).
void quantize_iq4_blocks(int n, const float* x, uint16_t* d, uint8_t* qs, uint16_t* scales_h, uint8_t* scales_l,
                         const float* importance);

}  // namespace okapi::quant::detail
