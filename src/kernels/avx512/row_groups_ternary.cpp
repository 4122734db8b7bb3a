// Row-group kernels for the ternary formats TQ2_0 and TQ1_0 (value = (q - 1) * d, q in 0..2, one
// fp16 d per 256 values) against Q8_K activations. Both pack into one 2-bit layout, so TQ1_0's
// base-3 bytes are decoded once at load instead of at every product (66 bytes per row and
// super-block instead of TQ1_0's 54).
//
// Packed super-block of 16 rows, 1056 bytes: 16 chunks of 64 bytes, then the 16 rows' fp16 d.
// Byte 4r + i of chunk c holds, in bits 2s..2s+1 (s = 0..3), row r's level of element
// 4(c + 16 s) + i: so the bits s of a chunk are the 4-level run c + 16 s of all 16 rows, and
// `vpdpbusd` meets them with that run's activation bytes.
//
// The exact int32 dot of a super-block is sum(q * a) - sum(a) (the activation's word 0); then,
// as every row-group kernel, acc = fma(d_w * d_a, float(dot), acc).
//   prefill: each run unpacked to bytes 0..2 (a shift and a mask) and met by up to 8 tokens;
//   decode: the runs only masked in place, (q << 2s), into four sums that are exact multiples of
//           4^s, shifted back once per super-block: no shift per run.
#include "kernels/avx512/q8_k_activation.hpp"
#include "kernels/avx512/row_group_driver.hpp"
#include "kernels/avx512/row_groups.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"

namespace okapi::quant::avx512 {
namespace {

constexpr int kChunks = 16;

// Level (0..2) of value e of a block, as ggml's dequantize_row_tq2_0 / tq1_0 lay them out.
int tq_level(const block_tq2_0& b, int e) { return (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }
int tq_level(const block_tq1_0& b, int e) {
  constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto trit = [&](uint8_t byte, int n) { return (static_cast<uint8_t>(byte * kPow3[n]) * 3) >> 8; };
  if (e < 160) return trit(b.qs[e % 32], e / 32);
  if (e < 240) return trit(b.qs[32 + (e - 160) % 16], (e - 160) / 16);
  return trit(b.qh[(e - 240) % 4], (e - 240) / 4);
}

template <typename B>
struct TernaryRows {
  using Block = B;
  static constexpr int64_t kBlockElems = QK_K;
  static constexpr size_t kDOffset = kChunks * 64;
  static constexpr size_t kBlockBytes = kDOffset + kRows * sizeof(uint16_t);
  static constexpr int kTokens = 8;

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    for (int c = 0; c < kChunks; ++c) {
      for (int i = 0; i < 4; ++i) {
        int byte = 0;
        for (int s = 0; s < 4; ++s) byte |= tq_level(src, 4 * (c + 16 * s) + i) << (2 * s);
        dst[64 * c + 4 * r + i] = static_cast<uint8_t>(byte);
      }
    }
    std::memcpy(dst + kDOffset + r * sizeof(uint16_t), &src.d, sizeof(uint16_t));
  }
  static size_t activation_bytes(int64_t n_in) { return q8_K_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) { prepare_q8_K<Sums::ternary>(x, n_in, out); }

  template <int T>
  static void tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                     __mmask16 store) {
    over_blocks<T>(nb, y, y_stride, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      __m512i dot[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) dot[t] = _mm512_set1_epi32(KActivationRow(a + static_cast<size_t>(t) * a_row, nb).offset(b, 0));
      const __m512i mask = _mm512_set1_epi8(3);
      for (int c = 0; c < kChunks; ++c) {
        const __m512i v = _mm512_loadu_si512(block + 64 * c);
        const __m512i w[4] = {_mm512_and_si512(v, mask), _mm512_and_si512(_mm512_srli_epi16(v, 2), mask),
                              _mm512_and_si512(_mm512_srli_epi16(v, 4), mask),
                              _mm512_and_si512(_mm512_srli_epi16(v, 6), mask)};
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) {
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) {
            const KActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
            dot[t] = _mm512_dpbusd_epi32(dot[t], w[s], act.bytes(b, c + 16 * s));
          }
        }
      }
      const __m512 d_w = row_scales(block + kDOffset);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const KActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
        acc[t] = accumulate(acc[t], d_w, act.scales[b], dot[t]);
      }
    });
  }

  static void one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
    const KActivationRow act(a, nb);
    over_blocks<1>(nb, y, 0, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      prefetch_ahead<kBlockBytes>(block);
      const uint8_t* levels = act.levels + b * QK_K;
      __m512i dot[4];
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) dot[s] = _mm512_setzero_si512();
      for (int c = 0; c < kChunks; ++c) {
        const __m512i v = _mm512_loadu_si512(block + 64 * c);
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) {
          const __m512i bytes = _mm512_set1_epi32(load_i32(levels + 4 * (c + 16 * s)));
          dot[s] = _mm512_dpbusd_epi32(dot[s], _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(3 << (2 * s)))), bytes);
        }
      }
      // dot[s] = 4^s * the run sums exactly
      const __m512i sum = _mm512_add_epi32(
          _mm512_add_epi32(_mm512_add_epi32(dot[0], _mm512_srai_epi32(dot[1], 2)),
                           _mm512_add_epi32(_mm512_srai_epi32(dot[2], 4), _mm512_srai_epi32(dot[3], 6))),
          _mm512_set1_epi32(act.offset(b, 0)));
      acc[0] = accumulate(acc[0], row_scales(block + kDOffset), act.scales[b], sum);
    });
  }
};

}  // namespace

RowGroupKernels tq2_0_row_groups() { return make_row_groups<TernaryRows<block_tq2_0>>(); }
RowGroupKernels tq1_0_row_groups() { return make_row_groups<TernaryRows<block_tq1_0>>(); }

}  // namespace okapi::quant::avx512
