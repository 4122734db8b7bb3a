// The parts of the IQ3_* and IQ1_* row-group kernels (row_groups_iq3.cpp, row_groups_iq1.cpp) that
// the two families share: codebook weights decoded per 16 rows into signed int8 chunks, met by
// unsigned activations. Include ONLY from files under avx512/.
//
// Activation row: nb * 256 bytes, the Q8_K levels plus 128 (unsigned), then nb floats, the Q8_K
// scale divided by the format's kDivisor (4 for IQ3_XXS, 8 for IQ1_*: exact, a power of two).
// `vpdpbusd` (unsigned activations x signed weights) then sums (a + 128) * w; a packed block
// carries per row the offset -128 * sum_g scale_g * sum(w in g), so that
//   bsum = sum_g scale_g * (sum over the group's chunks of vpdpbusd) + offset
// is the exact integer dot of the super-block. Per (row, token), in block order:
//   acc = fma(d_w * d_a', float(bsum), acc)
// with the same operations for a lone token and a batch (batch-invariant).
//
// A format plugs in a struct F with Block, kBlockBytes, kScaleGroups (groups sharing one odd
// scale), kChunksPerScale (4-value chunks per group: kScaleGroups * kChunksPerScale = 64),
// kScales / kOffsets / kD (offsets of the scale bytes [group][row], the 16 int32 offsets and the
// 16 fp16 d in a packed block), kDivisor, pack_block(src, r, dst) and weights(block, k) (chunk k
// of the 16 rows as signed int8, row r in bytes 4r..4r+3).
#pragma once
#include <type_traits>
#include <vector>

#include "kernels/avx2/row_kernels.hpp"
#include "kernels/avx512/row_group_driver.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx512 {
namespace {

template <int kDivisor>
size_t grid_activation_bytes(int64_t n_in) {
  return static_cast<size_t>(n_in / QK_K) * (QK_K + sizeof(float));
}

template <int kDivisor>
void prepare_grid_activation(const float* x, int64_t n_in, void* out) {
  const int64_t nb = n_in / QK_K;
  thread_local std::vector<block_q8_K> blocks;
  blocks.resize(static_cast<size_t>(nb));
  avx2::quantize_q8_K(x, blocks.data(), n_in);
  auto* levels = static_cast<uint8_t*>(out);
  auto* scales = levels + nb * QK_K;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const block_q8_K& blk = blocks[static_cast<size_t>(b)];
    for (int c = 0; c < QK_K; c += 64) {
      _mm512_storeu_si512(levels + b * QK_K + c, _mm512_xor_si512(_mm512_loadu_si512(blk.qs + c), bias));
    }
    const float d = blk.d * (1.0f / static_cast<float>(kDivisor));
    std::memcpy(scales + 4 * b, &d, sizeof(d));
  }
}

// Adds a row's part to a 64-bit mask word of a packed block (bits 4r..4r+3 of word `at`).
inline void or_mask_bits(uint8_t* at, uint64_t bits) {
  uint64_t word;
  std::memcpy(&word, at, sizeof(word));
  word |= bits;
  std::memcpy(at, &word, sizeof(word));
}

template <typename F>
struct GridRows : F {
  static constexpr int64_t kBlockElems = QK_K;
  static constexpr int kTokens = 8;
  static_assert(F::kScaleGroups * F::kChunksPerScale == QK_K / 4);

  static size_t activation_bytes(int64_t n_in) { return grid_activation_bytes<F::kDivisor>(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) {
    prepare_grid_activation<F::kDivisor>(x, n_in, out);
  }

  template <int T>
  static void run(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                  __mmask16 store) {
    over_blocks<T>(nb, y, y_stride, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * F::kBlockBytes;
      if constexpr (T == 1) prefetch_ahead<F::kBlockBytes>(block);
      __m512i total[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) total[t] = _mm512_setzero_si512();
      for (int g = 0; g < F::kScaleGroups; ++g) {
        __m512i part[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) part[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int k = F::kChunksPerScale * g; k < F::kChunksPerScale * (g + 1); ++k) {
          const __m512i w = F::weights(block, k);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const uint8_t* levels = a + static_cast<size_t>(t) * a_row + static_cast<size_t>(b) * QK_K;
            part[t] = _mm512_dpbusd_epi32(part[t], _mm512_set1_epi32(load_i32(levels + 4 * k)), w);
          }
        }
        const __m512i ls =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + F::kScales + kRows * g)));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) total[t] = _mm512_add_epi32(total[t], _mm512_mullo_epi32(part[t], ls));
      }
      const __m512i offsets = _mm512_loadu_si512(block + F::kOffsets);
      const __m512 d_w = row_scales(block + F::kD);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        float d_a;
        std::memcpy(&d_a, a + static_cast<size_t>(t) * a_row + static_cast<size_t>(nb) * QK_K + 4 * static_cast<size_t>(b),
                    sizeof(d_a));
        acc[t] = accumulate(acc[t], d_w, d_a, _mm512_add_epi32(total[t], offsets));
      }
    });
  }

  template <int T>
  static void tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                     __mmask16 store) {
    run<T>(nb, group, a, a_row, y, y_stride, store);
  }
  static void one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
    run<1>(nb, group, a, 0, y, 0, store);
  }
};

}  // namespace
}  // namespace okapi::quant::avx512
