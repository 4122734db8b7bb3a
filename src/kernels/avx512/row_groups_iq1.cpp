// Row-group kernels for IQ1_S and IQ1_M against Q8_K activations (grid_row_groups.hpp: 16
// interleaved rows, codebook weights decoded per chunk, unsigned activations).
//
// A value is d * scale * (grid + delta / 8), grid in -1/0/1 and delta +-1, so the weight the
// kernel multiplies is 8 * grid + delta (int8: -9, -7, -1, 1, 7, 9) and the activation scale is
// the Q8_K scale / 8: bsum = 8 * (ggml's sumi) + (ggml's sumi1), exactly. Packed super-block of 16
// rows, unit u = 0..31 (8 values, one codebook index):
//   indices  512 bytes: byte 16u + r = the low 8 bits of row r's index of unit u;
//   high     256 bytes: nibble r % 2 of byte 8u + r / 2 = its high 3 bits;
//   deltas   64-bit masks, bits 4r..4r+3 set where row r's delta is negative: IQ1_S one per 32
//            values (8 words), IQ1_M one per unit (32 words);
//   scales   bytes [group][row]: the odd scales 2s + 1, IQ1_S per 32 values (8 groups), IQ1_M
//            per 16 (16 groups);
//   offsets  16 int32, d 16 fp16 (IQ1_M's assembled from its scale words).
// Chunk k (4 values) of unit k / 2 is one 32-bit gather from the codebook (its half k % 2).
#include "kernels/avx512/grid_row_groups.hpp"
#include "kernels/scalar/iq1_grid.hpp"

namespace okapi::quant::avx512 {
namespace {

constexpr int kUnits = QK_K / 8;

template <bool kM>
struct Iq1Format {
  using Block = std::conditional_t<kM, iq1::block_iq1_m, iq1::block_iq1_s>;
  static constexpr int kScaleGroups = kM ? 16 : 8, kChunksPerScale = kM ? 4 : 8, kDivisor = 8;
  static constexpr int kDeltaWords = kM ? kUnits : 8;
  static constexpr size_t kIndices = 0;
  static constexpr size_t kHigh = kIndices + kUnits * kRows;
  static constexpr size_t kDeltas = kHigh + kUnits * kRows / 2;
  static constexpr size_t kScales = kDeltas + kDeltaWords * sizeof(uint64_t);
  static constexpr size_t kOffsets = kScales + kScaleGroups * kRows;
  static constexpr size_t kD = kOffsets + kRows * sizeof(int32_t);
  static constexpr size_t kBlockBytes = kD + kRows * sizeof(uint16_t);

  // Row data from the stored block: index of unit u, whether its delta is negative, the odd
  // scale of group g, the fp16 d.
  static int index(const Block& src, int u) {
    if constexpr (kM) {
      return src.qs[u] | ((src.qh[u / 2] >> (4 * (u % 2))) & 7) << 8;
    } else {
      return src.qs[u] | ((src.qh[u / 4] >> (3 * (u % 4))) & 7) << 8;
    }
  }
  static bool negative(const Block& src, int u) {
    if constexpr (kM) {
      return (src.qh[u / 2] >> (4 * (u % 2) + 3)) & 1;
    } else {
      return src.qh[u / 4] & 0x8000;
    }
  }
  static uint16_t scale_word(const Block& src, int i) {
    uint16_t w;
    std::memcpy(&w, src.scales + 2 * i, sizeof(w));
    return w;
  }
  static int scale(const Block& src, int g) {
    if constexpr (kM) {  // g = 2 * group of 32 + half
      return 2 * ((scale_word(src, g / 4) >> (6 * ((g / 2) % 2) + 3 * (g % 2))) & 7) + 1;
    } else {
      return 2 * ((src.qh[g] >> 12) & 7) + 1;
    }
  }
  static uint16_t d(const Block& src) {
    if constexpr (kM) {
      return static_cast<uint16_t>((scale_word(src, 0) >> 12) | ((scale_word(src, 1) >> 8) & 0x00f0) |
                                   ((scale_word(src, 2) >> 4) & 0x0f00) | (scale_word(src, 3) & 0xf000));
    } else {
      return src.d;
    }
  }

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    int32_t offset = 0;
    for (int g = 0; g < kScaleGroups; ++g) {
      int32_t sum = 0;
      for (int u = g * kUnits / kScaleGroups; u < (g + 1) * kUnits / kScaleGroups; ++u) {
        const int idx = index(src, u);
        dst[kIndices + kRows * u + r] = static_cast<uint8_t>(idx & 255);
        dst[kHigh + 8 * u + r / 2] = static_cast<uint8_t>(dst[kHigh + 8 * u + r / 2] | (idx >> 8) << (4 * (r % 2)));
        const bool neg = negative(src, u);
        if (neg && (kM || u % 4 == 0)) or_mask_bits(dst + kDeltas + 8 * (kM ? u : u / 4), uint64_t{0xf} << (4 * r));
        for (int j = 0; j < 8; ++j) {
          const auto v = static_cast<int8_t>((iq1::kGrid[idx] >> (8 * j)) & 0xff);
          sum += 8 * v + (neg ? -1 : 1);
        }
      }
      const int ls = scale(src, g);
      dst[kScales + kRows * g + r] = static_cast<uint8_t>(ls);
      offset += ls * sum;
    }
    offset *= -128;
    std::memcpy(dst + kOffsets + 4 * r, &offset, sizeof(offset));
    const uint16_t d16 = d(src);
    std::memcpy(dst + kD + 2 * r, &d16, sizeof(d16));
  }

  // 8 * grid + delta of chunk k of the 16 rows, as int8.
  static __m512i weights(const uint8_t* block, int k) {
    const int u = k / 2;
    const __m128i high_packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + kHigh + 8 * u));
    const __m128i nibbles = _mm_set1_epi8(0x0f);
    const __m128i high = _mm_unpacklo_epi8(_mm_and_si128(high_packed, nibbles),
                                           _mm_and_si128(_mm_srli_epi16(high_packed, 4), nibbles));
    const __m512i idx = _mm512_or_si512(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kIndices + kRows * u))),
        _mm512_slli_epi32(_mm512_cvtepu8_epi32(high), 8));
    // The codebook as uint32 halves: entry idx's half k % 2 is at byte 8 idx + 4 (k % 2).
    const __m512i grid = _mm512_i32gather_epi32(idx, reinterpret_cast<const uint8_t*>(iq1::kGrid) + 4 * (k % 2), 8);
    // 8 * grid in each byte: a 16-bit shift, the bits crossing into the next byte masked off.
    const __m512i eight = _mm512_and_si512(_mm512_slli_epi16(grid, 3), _mm512_set1_epi8(static_cast<char>(0xf8)));
    uint64_t negative_delta;
    std::memcpy(&negative_delta, block + kDeltas + 8 * (kM ? u : u / 4), sizeof(negative_delta));
    const __m512i one = _mm512_set1_epi8(1);
    return _mm512_mask_sub_epi8(_mm512_add_epi8(eight, one), negative_delta, eight, one);
  }
};

}  // namespace
}  // namespace okapi::quant::avx512

namespace okapi::quant::detail {

void use_avx512_iq1_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.type == DType::IQ1_S) f.row_groups = avx512::make_row_groups<avx512::GridRows<avx512::Iq1Format<false>>>();
    if (f.type == DType::IQ1_M) f.row_groups = avx512::make_row_groups<avx512::GridRows<avx512::Iq1Format<true>>>();
  }
}

}  // namespace okapi::quant::detail
