// IQ2_XXS, IQ2_XS, IQ2_S blocks, byte for byte as ggml-common.h lays them out (fp16 d raw), and
// the decoding of one group of 8 that every tier shares: the group's grid index and sign byte.
//
// IQ2_XXS (2.06 bpw): per 32 values two uint32: four 8-bit grid indices, then four 7-bit sign
//   indices (bits 0..27) and a 4-bit scale s (bits 28..31); value = d * (0.5 + s) / 4 * grid * sign.
// IQ2_XS (2.31 bpw): per group of 8 one uint16: 9-bit grid index, 7-bit sign index; a 4-bit scale
//   per 16 values in `scales`.
// IQ2_S (2.56 bpw): per group an 8-bit index low part in qs[0..31], its 2 high bits in qh, a full
//   sign byte in qs[32..63]; scales as IQ2_XS.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/blocks.hpp"
#include "kernels/scalar/iq_grids.hpp"

namespace okapi::quant {

struct block_iq2_xxs { uint16_t d; uint16_t qs[QK_K / 8]; };
struct block_iq2_xs { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
struct block_iq2_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82);

namespace iq {

// Group g (0..31) of a block: the grid point (8 bytes, one per value) and the sign byte (bit j
// negates value j). The scale index of the group's 32 (XXS) or 16 (XS, S) values comes apart.
struct Group {
  uint64_t grid;
  uint8_t signs;
};

inline uint32_t iq2_xxs_word(const block_iq2_xxs& b, int ib32, int half) {
  uint32_t w;
  std::memcpy(&w, reinterpret_cast<const uint8_t*>(b.qs) + 8 * ib32 + 4 * half, sizeof(w));
  return w;
}
inline Group iq2_xxs_group(const block_iq2_xxs& b, int g) {
  const uint32_t idx = iq2_xxs_word(b, g / 4, 0), sgn = iq2_xxs_word(b, g / 4, 1);
  const int l = g % 4;
  return {kIq2xxsGrid[(idx >> (8 * l)) & 0xFF], kSigns[(sgn >> (7 * l)) & 127]};
}
// The 4-bit scale of the 32 values ib32.
inline int iq2_xxs_scale(const block_iq2_xxs& b, int ib32) { return static_cast<int>(iq2_xxs_word(b, ib32, 1) >> 28); }

inline Group iq2_xs_group(const block_iq2_xs& b, int g) {
  return {kIq2xsGrid[b.qs[g] & 511], kSigns[b.qs[g] >> 9]};
}
// The 4-bit scale of the 16 values ib16.
inline int iq2_xs_scale(const uint8_t* scales, int ib16) { return (scales[ib16 / 2] >> (4 * (ib16 % 2))) & 0xF; }

inline Group iq2_s_group(const block_iq2_s& b, int g) {
  const int high = (b.qh[g / 4] >> (2 * (g % 4))) & 3;
  return {kIq2sGrid[b.qs[g] | (high << 8)], b.qs[QK_K / 8 + g]};
}

}  // namespace iq
}  // namespace okapi::quant
