// Row-group kernels for Q8_0 / Q4_0 weights (layouts in row_groups.hpp). The inner loop is, per
// block and token, 8 `vpdpbusd` (16 rows x 4 levels each) with the activation's 4 bytes broadcast
// from memory, then one convert, one multiply and one FMA. Up to kTokens tokens share each
// block's unpacked weights; their float accumulators stay in registers across the row.
#include "quant/avx512/row_groups.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "quant/avx2/kernels.hpp"
#include "quant/avx512/simd.hpp"
#include "quant/blocks.hpp"

namespace okapi::quant::avx512 {
namespace {

constexpr int64_t kRows = 16;
constexpr int kTokens = 8;  // tokens per pass over a group's blocks

size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }

int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ---- Activations: Q8_0 levels, float scales, int32 offsets ----

size_t activation_bytes(int64_t n_in) { return static_cast<size_t>(n_in / QK8_0) * (QK8_0 + 4 + 4); }

// Quantized with the avx2 tier's Q8_0 quantizer (byte-identical to the reference, so to ggml).
template <int kBias>
void prepare_activation(const float* x, int64_t n_in, void* out) {
  const int64_t nb = n_in / QK8_0;
  thread_local std::vector<block_q8_0> blocks;
  blocks.resize(static_cast<size_t>(nb));
  avx2::quantize_q8_0(x, blocks.data(), n_in);
  auto* qs = static_cast<int8_t*>(out);
  auto* d = reinterpret_cast<float*>(qs + nb * QK8_0);
  auto* offset = reinterpret_cast<int32_t*>(d + nb);
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b) {
    const block_q8_0& blk = blocks[static_cast<size_t>(b)];
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * QK8_0), q);
    d[b] = _cvtsh_ss(blk.d);
    // sum of the 32 levels: vpdpbusd(1, q) gives 8 sums of 4, then a horizontal add.
    const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    offset[b] = -kBias * _mm_cvtsi128_si32(s);
  }
}

// ---- Weights: per-format packing and unpacking ----

// 64 bytes as two 32-byte loads: streaming from DRAM, this CPU reads faster with 256-bit loads.
__m512i load_halves(const uint8_t* p) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

struct Q8_0Rows {
  using Block = block_q8_0;
  static constexpr int kBias = 128;
  static constexpr size_t kLevelBytes = 512;  // per block and group
  static void pack_levels(const Block& src, int64_t r, uint8_t* dst) {
    for (int k = 0; k < 8; ++k) {
      for (int i = 0; i < 4; ++i) dst[64 * k + 4 * r + i] = static_cast<uint8_t>(src.qs[4 * k + i] ^ 0x80);
    }
  }
  // The 8 vectors of unsigned bytes that pair with activation bytes 4k..4k+3, k = 0..7.
  static void unpack(const uint8_t* levels, __m512i* w) {
    for (int k = 0; k < 8; ++k) w[k] = load_halves(levels + 64 * k);
  }
};

struct Q4_0Rows {
  using Block = block_q4_0;
  static constexpr int kBias = 8;
  static constexpr size_t kLevelBytes = 256;
  static void pack_levels(const Block& src, int64_t r, uint8_t* dst) {
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < 4; ++i) dst[64 * k + 4 * r + i] = src.qs[4 * k + i];
    }
  }
  static void unpack(const uint8_t* levels, __m512i* w) {
    const __m512i mask = _mm512_set1_epi8(0x0f);
    for (int k = 0; k < 4; ++k) {
      const __m512i v = load_halves(levels + 64 * k);
      w[k] = _mm512_and_si512(v, mask);
      w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
    }
  }
};

// Per block: the levels of the 16 rows, then their 16 fp16 scales (one stream of bytes).
template <typename W>
constexpr size_t kBlockBytes = W::kLevelBytes + kRows * sizeof(uint16_t);

template <typename W>
size_t group_bytes(int64_t n_in) {
  return round_up_64(static_cast<size_t>(n_in / QK8_0) * kBlockBytes<W>);
}

template <typename W>
void pack(const void* w, size_t w_row, int64_t n_rows, int64_t n_in, void* group) {
  const int64_t nb = n_in / QK8_0;
  std::memset(group, 0, group_bytes<W>(n_in));
  for (int64_t r = 0; r < std::min(n_rows, kRows); ++r) {
    const auto* src = reinterpret_cast<const typename W::Block*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * w_row);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* block = static_cast<uint8_t*>(group) + static_cast<size_t>(b) * kBlockBytes<W>;
      W::pack_levels(src[b], r, block);
      std::memcpy(block + W::kLevelBytes + r * sizeof(uint16_t), &src[b].d, sizeof(uint16_t));
    }
  }
}

// ---- The kernel ----

// T tokens (activation rows a_row bytes apart) x one group: y[t * y_stride + r] for the rows in
// `store` (a lane mask).
template <typename W, int T>
void group_tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                  __mmask16 store) {
  const auto q_bytes = static_cast<size_t>(nb) * QK8_0;
  // The loops over tokens and levels are unrolled so that the accumulators live in registers.
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i w[8];
    const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes<W>;
    W::unpack(block, w);
    const __m512 d_w = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + W::kLevelBytes)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const uint8_t* a_t = a + static_cast<size_t>(t) * a_row;
      const uint8_t* q = a_t + static_cast<size_t>(b) * QK8_0;
      const auto* d_a = reinterpret_cast<const float*>(a_t + q_bytes);
      const auto* offset = reinterpret_cast<const int32_t*>(d_a + nb);
      // The integer dot is exact, so how it is split does not change a bit: few tokens (decode)
      // get 4 independent chains, to hide vpdpbusd's latency, many tokens one chain each.
      constexpr int kChains = T <= 2 ? 4 : 1;
      __m512i part[kChains];
      part[0] = _mm512_set1_epi32(offset[b]);
#pragma GCC unroll 4
      for (int c = 1; c < kChains; ++c) part[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        part[k % kChains] = _mm512_dpbusd_epi32(part[k % kChains], w[k], _mm512_set1_epi32(load_i32(q + 4 * k)));
      }
      __m512i dot = part[0];
#pragma GCC unroll 4
      for (int c = 1; c < kChains; ++c) dot = _mm512_add_epi32(dot, part[c]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d_w, _mm512_set1_ps(d_a[b])), _mm512_cvtepi32_ps(dot), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, store, acc[t]);
}

template <typename W>
void gemm(int64_t n_in, const void* groups, int64_t n_rows, const void* a, size_t a_row, int64_t n_tokens, float* y,
          int64_t y_stride) {
  const int64_t nb = n_in / QK8_0;
  const size_t g_bytes = group_bytes<W>(n_in);
  const int64_t n_groups = (n_rows + kRows - 1) / kRows;
  // Token groups outside, row groups inside: the tokens' activations stay in L1 across the rows.
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens) {
    const int64_t n_t = std::min<int64_t>(kTokens, n_tokens - t0);
    const uint8_t* a_t = static_cast<const uint8_t*>(a) + static_cast<size_t>(t0) * a_row;
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* group = static_cast<const uint8_t*>(groups) + static_cast<size_t>(g) * g_bytes;
      const int64_t rows_left = n_rows - g * kRows;
      const auto store = static_cast<__mmask16>(rows_left >= kRows ? 0xffff : (1u << rows_left) - 1);
      float* y_g = y + t0 * y_stride + g * kRows;
      switch (n_t) {
        case 8: group_tokens<W, 8>(nb, group, a_t, a_row, y_g, y_stride, store); break;
        case 7: group_tokens<W, 7>(nb, group, a_t, a_row, y_g, y_stride, store); break;
        case 6: group_tokens<W, 6>(nb, group, a_t, a_row, y_g, y_stride, store); break;
        case 5: group_tokens<W, 5>(nb, group, a_t, a_row, y_g, y_stride, store); break;
        case 4: group_tokens<W, 4>(nb, group, a_t, a_row, y_g, y_stride, store); break;
        case 3: group_tokens<W, 3>(nb, group, a_t, a_row, y_g, y_stride, store); break;
        case 2: group_tokens<W, 2>(nb, group, a_t, a_row, y_g, y_stride, store); break;
        default: group_tokens<W, 1>(nb, group, a_t, a_row, y_g, y_stride, store); break;
      }
    }
  }
}

template <typename W>
RowGroupKernels row_groups() {
  RowGroupKernels k;
  k.rows = kRows;
  k.group_bytes = group_bytes<W>;
  k.pack = pack<W>;
  k.activation_bytes = activation_bytes;
  k.prepare_activation = prepare_activation<W::kBias>;
  k.gemm = gemm<W>;
  return k;
}

}  // namespace

RowGroupKernels q8_0_row_groups() { return row_groups<Q8_0Rows>(); }
RowGroupKernels q4_0_row_groups() { return row_groups<Q4_0Rows>(); }

}  // namespace okapi::quant::avx512
