// Row-group kernels for IQ3_XXS and IQ3_S against Q8_K activations (row_group_driver.hpp: 16
// interleaved rows, one kernel for decode and prefill).
//
// The packed form keeps the grid indices (no expansion at load: decode streams about the stored
// bits, 110 / 118 bytes per row and 256 values against 98 / 110 stored). Packed super-block of 16
// rows, point k = 0..63 (values 4k..4k+3):
//   indices  1024 bytes: byte 16k + r = the low 8 bits of row r's grid index of point k;
//   high     (IQ3_S only) 64 uint16: bit r of word k = the ninth bit of that index;
//   signs    64 uint64: bit 4r + j of word k set when row r's value 4k + j is negative;
//   scales   8 x 16 bytes: byte 16g + r = row r's odd scale 2s + 1 of group g (32 values);
//   offsets  16 int32: -128 * sum_g scale_g * (sum of row r's signed magnitudes in group g);
//   d        16 fp16.
// A chunk of 16 points (one per row) is one gather from the grid table: lane r holds row r's 4
// magnitudes of point k, signed by the 64-bit mask (vpsubb under mask) into int8 weights. The
// activation row holds the Q8_K levels plus 128 as unsigned bytes, so `vpdpbusd` (unsigned
// activations x signed weights) over the 8 points of a group gives dot_g + 128 * sum_g(w); the
// group sums are multiplied by the scales (vpmulld), added, and the offsets restore the exact
// int32 super-block dot sum_g scale_g * dot_g (ggml's bsum). Then, as every row-group kernel,
//   acc = fma(d_w * d_a, float(bsum), acc),
// with d_a the Q8_K scale times 0.25 for IQ3_XXS (its scale (2s + 1) / 4), exactly.
// Prefill decodes each point once per block and meets up to 8 tokens with it.
#include "kernels/avx512/grid_row_groups.hpp"
#include "kernels/scalar/iq3_grids.hpp"

namespace okapi::quant::avx512 {
namespace {

constexpr int kPoints = QK_K / 4;
constexpr int kGroups = QK_K / 32;

template <bool kXxs>
struct Iq3Format {
  using Block = std::conditional_t<kXxs, iq3::block_iq3_xxs, iq3::block_iq3_s>;
  static constexpr int kScaleGroups = kGroups, kChunksPerScale = 8, kDivisor = kXxs ? 4 : 1;
  static constexpr size_t kIndices = 0;
  static constexpr size_t kHigh = kIndices + kPoints * kRows;
  static constexpr size_t kSigns = kHigh + (kXxs ? 0 : kPoints * sizeof(uint16_t));
  static constexpr size_t kScales = kSigns + kPoints * sizeof(uint64_t);
  static constexpr size_t kOffsets = kScales + kGroups * kRows;
  static constexpr size_t kD = kOffsets + kRows * sizeof(int32_t);
  static constexpr size_t kBlockBytes = kD + kRows * sizeof(uint16_t);

  static const uint32_t* grid() { return kXxs ? iq3::kXxsGrid : iq3::kSGrid; }

  // Row r's grid index, the 4 sign bits of point k, and the odd scale of group g, from the stored block.
  static int index(const Block& src, int k) {
    if constexpr (kXxs) {
      return src.qs[k];
    } else {
      return src.qs[k] | ((src.qh[k / 8] >> (k % 8)) & 1) << 8;
    }
  }
  static uint32_t sign_bits(const Block& src, int k) {
    if constexpr (kXxs) {
      uint32_t word;
      std::memcpy(&word, src.qs + QK_K / 4 + 4 * (k / 8), sizeof(word));
      return (iq3::kSigns[(word >> (7 * ((k % 8) / 2))) & 127] >> (4 * (k % 2))) & 0xf;
    } else {
      return (src.signs[k / 2] >> (4 * (k % 2))) & 0xf;
    }
  }
  static int scale(const Block& src, int g) {
    if constexpr (kXxs) {
      uint32_t word;
      std::memcpy(&word, src.qs + QK_K / 4 + 4 * g, sizeof(word));
      return static_cast<int>(2 * (word >> 28) + 1);
    } else {
      return 2 * ((src.scales[g / 2] >> (4 * (g % 2))) & 0xf) + 1;
    }
  }

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    int32_t offset = 0;
    for (int g = 0; g < kGroups; ++g) {
      int32_t sum = 0;
      for (int k = 8 * g; k < 8 * g + 8; ++k) {
        const int idx = index(src, k);
        dst[kIndices + kRows * k + r] = static_cast<uint8_t>(idx & 255);
        if (!kXxs && idx >> 8) {
          uint16_t high;
          std::memcpy(&high, dst + kHigh + 2 * k, sizeof(high));
          high = static_cast<uint16_t>(high | 1u << r);
          std::memcpy(dst + kHigh + 2 * k, &high, sizeof(high));
        }
        const uint32_t bits = sign_bits(src, k);
        or_mask_bits(dst + kSigns + 8 * k, static_cast<uint64_t>(bits) << (4 * r));
        const uint32_t point = grid()[idx];
        for (int j = 0; j < 4; ++j) {
          const auto mag = static_cast<int32_t>((point >> (8 * j)) & 0xff);
          sum += (bits >> j) & 1 ? -mag : mag;
        }
      }
      const int ls = scale(src, g);
      dst[kScales + kRows * g + r] = static_cast<uint8_t>(ls);
      offset += ls * sum;
    }
    offset *= -128;
    std::memcpy(dst + kOffsets + 4 * r, &offset, sizeof(offset));
    std::memcpy(dst + kD + 2 * r, &src.d, sizeof(uint16_t));
  }

  // The signed int8 weights of point k of the 16 rows.
  static __m512i weights(const uint8_t* block, int k) {
    __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kIndices + kRows * k)));
    if constexpr (!kXxs) {
      uint16_t high;
      std::memcpy(&high, block + kHigh + 2 * k, sizeof(high));
      idx = _mm512_mask_or_epi32(idx, high, idx, _mm512_set1_epi32(256));
    }
    const __m512i mag = _mm512_i32gather_epi32(idx, grid(), 4);
    uint64_t signs;
    std::memcpy(&signs, block + kSigns + 8 * k, sizeof(signs));
    return _mm512_mask_sub_epi8(mag, signs, _mm512_setzero_si512(), mag);
  }
};

}  // namespace

}  // namespace okapi::quant::avx512

namespace okapi::quant::detail {

void use_avx512_iq3_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.type == DType::IQ3_XXS) f.row_groups = avx512::make_row_groups<avx512::GridRows<avx512::Iq3Format<true>>>();
    if (f.type == DType::IQ3_S) f.row_groups = avx512::make_row_groups<avx512::GridRows<avx512::Iq3Format<false>>>();
  }
}

}  // namespace okapi::quant::detail
