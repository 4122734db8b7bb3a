// Q8_K activations prepared for the avx512 row-group kernels of the 256-level formats (K-quants
// and ternary): the reference Q8_K levels and scale, and per super-block 16 int32 words whose
// meaning depends on the weight format (Sums). Include ONLY from files under avx512/.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx2/row_kernels.hpp"
#include "kernels/avx512/row_group_driver.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx512 {
namespace {

// ---- Activations: Q8_K levels, float scales, int32 offsets per 16 levels ----

constexpr int64_t kSubBlocks = QK_K / 16;

// Per super-block b of a row: levels at 256 b, the scale at levels_bytes + 4 b, the 16 offsets
// -32 * (the sum of each 16 levels) after all the scales.
struct KActivationRow {
  const uint8_t* levels;
  const float* scales;
  const int32_t* offsets;
  KActivationRow(const uint8_t* row, int64_t nb)
      : levels(row),
        scales(reinterpret_cast<const float*>(row + static_cast<size_t>(nb) * QK_K)),
        offsets(reinterpret_cast<const int32_t*>(scales + nb)) {}
  __m512i bytes(int64_t b, int64_t k) const { return _mm512_set1_epi32(load_i32(levels + b * QK_K + 4 * k)); }
  int32_t offset(int64_t b, int64_t j) const { return offsets[b * kSubBlocks + j]; }
};

// The 16 int32 words after the scales (one super-block's worth of `offset`), per weight format:
//   Q6_K: -32 * (the sum of each 16 levels);
//   Q4_K: words 0..3 the int16 pairs (sum of sub-block 2p, sum of 2p+1) of the sums of 32;
//   ternary (TQ1_0, TQ2_0, levels 0..2 for -1..1): word 0 -(the sum of all 256 levels);
//   Q2_K: words 0..7 the int16 pairs (sum of sub-block 2p, sum of 2p+1) of the sums of 16.
enum class Sums { q6_K, q4_K, ternary, q2_K };

inline size_t q8_K_activation_bytes(int64_t n_in) {
  return static_cast<size_t>(n_in / QK_K) * (QK_K + sizeof(float) + kSubBlocks * sizeof(int32_t));
}

// The avx2 tier's Q8_K quantizer (byte-identical to the reference), then the words from its
// sums of 16.
template <Sums kSums>
void prepare_q8_K(const float* x, int64_t n_in, void* out) {
  const int64_t nb = n_in / QK_K;
  thread_local std::vector<block_q8_K> blocks;
  blocks.resize(static_cast<size_t>(nb));
  avx2::quantize_q8_K(x, blocks.data(), n_in);
  auto* levels = static_cast<int8_t*>(out);
  auto* scales = reinterpret_cast<float*>(levels + nb * QK_K);
  auto* words = reinterpret_cast<int32_t*>(scales + nb);
  for (int64_t b = 0; b < nb; ++b) {
    const block_q8_K& blk = blocks[static_cast<size_t>(b)];
    std::memcpy(levels + b * QK_K, blk.qs, QK_K);
    scales[b] = blk.d;
    int32_t* w = words + b * kSubBlocks;
    for (int64_t j = 0; j < kSubBlocks; ++j) w[j] = kSums == Sums::q6_K ? -32 * blk.bsums[j] : 0;
    if constexpr (kSums == Sums::ternary) {
      for (int64_t j = 0; j < kSubBlocks; ++j) w[0] -= blk.bsums[j];
    }
    if constexpr (kSums == Sums::q2_K) {
      for (int p = 0; p < 8; ++p) {
        const auto lo = static_cast<uint16_t>(blk.bsums[2 * p]), hi = static_cast<uint16_t>(blk.bsums[2 * p + 1]);
        w[p] = static_cast<int32_t>(static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16);
      }
    }
    if constexpr (kSums == Sums::q4_K) {
      for (int p = 0; p < 4; ++p) {
        const auto lo = static_cast<uint16_t>(blk.bsums[4 * p] + blk.bsums[4 * p + 1]);
        const auto hi = static_cast<uint16_t>(blk.bsums[4 * p + 2] + blk.bsums[4 * p + 3]);
        w[p] = static_cast<int32_t>(static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16);
      }
    }
  }
}

}  // namespace
}  // namespace okapi::quant::avx512
