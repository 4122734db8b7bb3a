// Codebooks of the IQ2 family (IQ2_XXS, IQ2_XS, IQ2_S), bit-for-bit ggml-common.h's tables, and
// IQ1_S / IQ1_M's grid in the form its quantizer searches (ggml-quants.c kgrid_1bit_2048).
//
// An IQ2 grid entry is 8 unsigned bytes, each one of 0x08, 0x19, 0x2b (8, 25, 43); a value is
// d * scale * byte * sign. The 8 signs of a group of 8 come from a 7-bit index into kSigns (the
// eighth sign makes the number of minus signs even), or, for IQ2_S, from a full byte; bit j of the
// sign byte (kSignMask[j]) negates element j.
#pragma once
#include <cstdint>

namespace okapi::quant::iq {

extern const uint8_t kSignMask[8];     // kmask_iq2xs: 1 << j
extern const uint8_t kSigns[128];      // ksigns_iq2xs: 7 sign bits plus an even-parity eighth
extern const uint64_t kIq2xxsGrid[256];
extern const uint64_t kIq2xsGrid[512];
extern const uint64_t kIq2sGrid[1024];
// IQ1_S / IQ1_M grid points, 2 bits per coordinate (coordinate j = (v >> 2j) & 3 in 0..2, the
// dequantized value coordinate - 1), in iq1s_grid's order.
extern const uint16_t kIq1sSearchGrid[2048];

}  // namespace okapi::quant::iq
