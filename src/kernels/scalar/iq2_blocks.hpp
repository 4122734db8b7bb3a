// IQ2_XXS, IQ2_XS, IQ2_S blocks, byte for byte as ggml-common.h lays them out (fp16 d raw).
// Structs only (no inline code): the avx2 / avx512 files include it too.
//
// IQ2_XXS (2.06 bpw): per 32 values two uint32: four 8-bit grid indices, then four 7-bit sign
//   indices (bits 0..27) and a 4-bit scale s (bits 28..31); value = d * (0.5 + s) / 4 * grid * sign.
// IQ2_XS (2.31 bpw): per group of 8 one uint16: 9-bit grid index, 7-bit sign index; a 4-bit scale
//   per 16 values in `scales`.
// IQ2_S (2.56 bpw): per group an 8-bit index low part in qs[0..31], its 2 high bits in qh, a full
//   sign byte in qs[32..63]; scales as IQ2_XS.
#pragma once
#include <cstdint>

#include "kernels/blocks.hpp"

namespace okapi::quant {

struct block_iq2_xxs { uint16_t d; uint16_t qs[QK_K / 8]; };
struct block_iq2_xs { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
struct block_iq2_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82);

}  // namespace okapi::quant
