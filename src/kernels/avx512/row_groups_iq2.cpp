// Row-group kernels for IQ2_XXS, IQ2_XS, IQ2_S against Q8_K activations.
//
// Packed super-block of 16 rows: the grid index of each group of 8 values (32 groups x 16 rows,
// group-major; IQ2_XXS one byte: 512 bytes, IQ2_XS and IQ2_S uint16: 1024 bytes), each group's
// sign byte (bit j negates value j; IQ2_XXS / IQ2_XS's 7-bit sign indices looked up once at load:
// 512 bytes), the scale factor 2s + 1 of each 32 (IQ2_XXS: 8 x 16 bytes) or 16 (IQ2_XS, IQ2_S:
// 16 x 16 bytes) values, and the 16 fp16 d: per row and 256 values 74 bytes for IQ2_XXS (66
// stored), 114 for IQ2_XS (74) and IQ2_S (82).
//
// A group's 8 rows are gathered from the grid table as 8 qwords, the sign bytes of the 8 rows are
// one 64-bit mask that negates the bytes in place, +64 makes them unsigned (21..107), and two
// dword permutes turn two such halves into the chunks "16 rows x values 0..3" and "16 rows x
// values 4..7" that vpdpbusd meets with 4 activation levels. The +64 comes back per sub-block as
// -64 * (the sum of its activation levels), from the Q8_K sums of 16. Per sub-block the exact int32
// dot is multiplied by 2s + 1; per super-block acc = fma(d_w * d_a / 8, float(dot), acc).
//   decode (1 token): each group expanded in registers and used at once: only the packed bytes
//     and the grid table are read;
//   prefill: each super-block of a group expanded once into 4 KiB of int8 and met by every token
//     (the float accumulators in memory); the per-lane operations are decode's, so a token's
//     results are the same bits alone or in a batch.
#include <vector>

#include "kernels/avx512/q8_k_activation.hpp"
#include "kernels/avx512/row_group_driver.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq2_blocks.hpp"
#include "kernels/scalar/iq_grids.hpp"

namespace okapi::quant::avx512 {
namespace {

constexpr int kGroups = QK_K / 8;
constexpr size_t kIndexOffset = 0;

uint32_t word_at(const uint16_t* qs, int i) {
  uint32_t w;
  std::memcpy(&w, reinterpret_cast<const uint8_t*>(qs) + 4 * i, sizeof(w));
  return w;
}

// Per format: the grid, the sub-block size, and group g's index, sign byte and sub-block scale.
struct Xxs {
  using Block = block_iq2_xxs;
  static constexpr int kSubValues = 32;
  static constexpr size_t kIndexBytes = 1;  // 256 grid points
  static const uint64_t* grid() { return iq::kIq2xxsGrid; }
  static int index(const Block& b, int g) { return static_cast<int>((word_at(b.qs, 2 * (g / 4)) >> (8 * (g % 4))) & 0xFF); }
  static uint8_t signs(const Block& b, int g) { return iq::kSigns[(word_at(b.qs, 2 * (g / 4) + 1) >> (7 * (g % 4))) & 127]; }
  static int scale(const Block& b, int j) { return static_cast<int>(word_at(b.qs, 2 * j + 1) >> 28); }
};
struct Xs {
  using Block = block_iq2_xs;
  static constexpr int kSubValues = 16;
  static constexpr size_t kIndexBytes = 2;
  static const uint64_t* grid() { return iq::kIq2xsGrid; }
  static int index(const Block& b, int g) { return b.qs[g] & 511; }
  static uint8_t signs(const Block& b, int g) { return iq::kSigns[b.qs[g] >> 9]; }
  static int scale(const Block& b, int j) { return (b.scales[j / 2] >> (4 * (j % 2))) & 0xF; }
};
struct S {
  using Block = block_iq2_s;
  static constexpr int kSubValues = 16;
  static constexpr size_t kIndexBytes = 2;
  static const uint64_t* grid() { return iq::kIq2sGrid; }
  static int index(const Block& b, int g) { return b.qs[g] | ((b.qh[g / 4] >> (2 * (g % 4))) & 3) << 8; }
  static uint8_t signs(const Block& b, int g) { return b.qs[QK_K / 8 + g]; }
  static int scale(const Block& b, int j) { return (b.scales[j / 2] >> (4 * (j % 2))) & 0xF; }
};

template <typename F>
struct Iq2Rows {
  using Block = typename F::Block;
  static constexpr int64_t kBlockElems = QK_K;
  static constexpr int kSubs = QK_K / F::kSubValues;
  static constexpr int kGroupsPerSub = F::kSubValues / 8;
  static constexpr size_t kSignOffset = kIndexOffset + kGroups * kRows * F::kIndexBytes;
  static constexpr size_t kScaleOffset = kSignOffset + kGroups * kRows;
  static constexpr size_t kDOffset = kScaleOffset + static_cast<size_t>(kSubs) * kRows;
  static constexpr size_t kBlockBytes = kDOffset + kRows * sizeof(uint16_t);

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    for (int g = 0; g < kGroups; ++g) {
      const auto index = static_cast<uint16_t>(F::index(src, g));  // little-endian: the low byte first
      std::memcpy(dst + kIndexOffset + (static_cast<size_t>(g) * kRows + static_cast<size_t>(r)) * F::kIndexBytes, &index,
                  F::kIndexBytes);
      dst[kSignOffset + static_cast<size_t>(g) * kRows + static_cast<size_t>(r)] = F::signs(src, g);
    }
    for (int j = 0; j < kSubs; ++j) {
      dst[kScaleOffset + static_cast<size_t>(j) * kRows + static_cast<size_t>(r)] = static_cast<uint8_t>(2 * F::scale(src, j) + 1);
    }
    std::memcpy(dst + kDOffset + static_cast<size_t>(r) * sizeof(uint16_t), &src.d, sizeof(uint16_t));
  }

  // Group g of a packed block as two chunks (16 rows x values 0..3, 16 rows x values 4..7) of
  // unsigned bytes value + 64.
  static void expand_group(const uint8_t* block, int g, __m512i* even, __m512i* odd) {
    __m512i half[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const size_t at = static_cast<size_t>(g) * kRows + static_cast<size_t>(8 * h);
      const uint8_t* at_index = block + kIndexOffset + F::kIndexBytes * at;
      __m256i index;
      if constexpr (F::kIndexBytes == 1) {
        index = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at_index)));
      } else {
        index = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at_index)));
      }
      const __m512i grid = _mm512_i32gather_epi64(index, reinterpret_cast<const long long*>(F::grid()), 8);
      uint64_t signs;
      std::memcpy(&signs, block + kSignOffset + at, sizeof(signs));
      const __m512i v = _mm512_mask_sub_epi8(grid, static_cast<__mmask64>(signs), _mm512_setzero_si512(), grid);
      half[h] = _mm512_add_epi8(v, _mm512_set1_epi8(64));
    }
    const __m512i even_dwords = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_dwords = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *even = _mm512_permutex2var_epi32(half[0], even_dwords, half[1]);
    *odd = _mm512_permutex2var_epi32(half[0], odd_dwords, half[1]);
  }

  static __m512i sub_scales(const uint8_t* block, int j) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kScaleOffset + 16 * static_cast<size_t>(j))));
  }

  // -64 * (the sum of sub-block j's activation levels): the words are -32 * the sums of 16.
  static int32_t correction(const KActivationRow& act, int64_t b, int j) {
    int32_t words = 0;
    for (int k = 0; k < F::kSubValues / 16; ++k) words += act.offset(b, j * (F::kSubValues / 16) + k);
    return 2 * words;
  }

  static size_t activation_bytes(int64_t n_in) { return q8_K_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) { prepare_q8_K<Sums::q6_K>(x, n_in, out); }

  // One token: each group expanded in registers.
  static void one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
    const KActivationRow act(a, nb);
    over_blocks<1>(nb, y, 0, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      prefetch_ahead<kBlockBytes>(block);
      const uint8_t* levels = act.levels + b * QK_K;
      __m512i total = _mm512_setzero_si512();
      for (int j = 0; j < kSubs; ++j) {
        __m512i dot = _mm512_set1_epi32(correction(act, b, j));
#pragma GCC unroll 4
        for (int k = 0; k < kGroupsPerSub; ++k) {
          const int g = j * kGroupsPerSub + k;
          __m512i even, odd;
          expand_group(block, g, &even, &odd);
          dot = _mm512_dpbusd_epi32(dot, even, _mm512_set1_epi32(load_i32(levels + 8 * g)));
          dot = _mm512_dpbusd_epi32(dot, odd, _mm512_set1_epi32(load_i32(levels + 8 * g + 4)));
        }
        total = _mm512_add_epi32(total, _mm512_mullo_epi32(dot, sub_scales(block, j)));
      }
      acc[0] = accumulate(acc[0], row_scales(block + kDOffset), act.scales[b] * 0.125f, total);
    });
  }

  // Many tokens: each super-block expanded once, then met by every token; the float
  // accumulators (16 rows per token) live in `acc`.
  static void many_tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, int64_t n_tokens,
                          float* y, int64_t y_stride, __mmask16 store) {
    thread_local std::vector<float> acc;
    acc.assign(static_cast<size_t>(n_tokens) * kRows, 0.0f);
    alignas(64) uint8_t chunks[2 * kGroups][64];
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      for (int g = 0; g < kGroups; ++g) {
        __m512i even, odd;
        expand_group(block, g, &even, &odd);
        _mm512_store_si512(chunks[2 * g], even);
        _mm512_store_si512(chunks[2 * g + 1], odd);
      }
      const __m512 d_w = row_scales(block + kDOffset);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const KActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
        const uint8_t* levels = act.levels + b * QK_K;
        __m512i total = _mm512_setzero_si512();
        for (int j = 0; j < kSubs; ++j) {
          __m512i dot = _mm512_set1_epi32(correction(act, b, j));
#pragma GCC unroll 8
          for (int c = 2 * j * kGroupsPerSub; c < 2 * (j + 1) * kGroupsPerSub; ++c) {
            dot = _mm512_dpbusd_epi32(dot, _mm512_load_si512(chunks[c]), _mm512_set1_epi32(load_i32(levels + 4 * c)));
          }
          total = _mm512_add_epi32(total, _mm512_mullo_epi32(dot, sub_scales(block, j)));
        }
        float* acc_t = acc.data() + t * kRows;
        _mm512_storeu_ps(acc_t, accumulate(_mm512_loadu_ps(acc_t), d_w, act.scales[b] * 0.125f, total));
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) _mm512_mask_storeu_ps(y + t * y_stride, store, _mm512_loadu_ps(acc.data() + t * kRows));
  }

  static void gemm(int64_t n_in, const void* groups, int64_t n_rows, const void* a, size_t a_row, int64_t n_tokens,
                   float* y, int64_t y_stride) {
    if (n_tokens <= 0) return;
    const int64_t nb = n_in / QK_K;
    const size_t g_bytes = group_bytes<Iq2Rows>(n_in);
    const int64_t n_groups = (n_rows + kRows - 1) / kRows;
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* group = static_cast<const uint8_t*>(groups) + static_cast<size_t>(g) * g_bytes;
      const int64_t rows_left = n_rows - g * kRows;
      const auto store = static_cast<__mmask16>(rows_left >= kRows ? 0xffff : (1u << rows_left) - 1);
      if (n_tokens == 1) {
        one_token(nb, group, static_cast<const uint8_t*>(a), y + g * kRows, store);
      } else {
        many_tokens(nb, group, static_cast<const uint8_t*>(a), a_row, n_tokens, y + g * kRows, y_stride, store);
      }
    }
  }

  static RowGroupKernels kernels() {
    static_assert(kBlockBytes % 32 == 0);
    RowGroupKernels k;
    k.rows = kRows;
    k.group_bytes = group_bytes<Iq2Rows>;
    k.pack = pack<Iq2Rows>;
    k.activation_bytes = activation_bytes;
    k.prepare_activation = prepare_activation;
    k.gemm = gemm;
    return k;
  }
};

}  // namespace
}  // namespace okapi::quant::avx512

namespace okapi::quant::detail {

void use_avx512_iq2_kernels(std::vector<Format>& table) {
  for (Format& f : table) {
    if (f.vec_dot_type != DType::Q8_K) continue;
    if (f.type == DType::IQ2_XXS) f.row_groups = avx512::Iq2Rows<avx512::Xxs>::kernels();
    if (f.type == DType::IQ2_XS) f.row_groups = avx512::Iq2Rows<avx512::Xs>::kernels();
    if (f.type == DType::IQ2_S) f.row_groups = avx512::Iq2Rows<avx512::S>::kernels();
  }
}

}  // namespace okapi::quant::detail
