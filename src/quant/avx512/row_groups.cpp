// Row-group kernels for Q8_0 / Q4_0 weights (layouts in row_groups.hpp). The inner loop is, per
// block and token, 8 `vpdpbusd` (16 rows x 4 levels each) with the activation's 4 bytes broadcast
// from memory, then one convert, one multiply and one FMA. Up to kTokens tokens share each
// block's unpacked weights; their float accumulators stay in registers across the row.
#include "quant/avx512/row_groups.hpp"

#include <algorithm>
#include <cstring>

#include "quant/avx512/simd.hpp"
#include "quant/blocks.hpp"

namespace okapi::quant::avx512 {
namespace {

constexpr int64_t kRows = 16;
constexpr int kTokens = 16;  // tokens per pass over a group's blocks

size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }

int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ---- Activations: Q8_0 levels, float scales, int32 offsets ----

size_t activation_bytes(int64_t n_in) { return static_cast<size_t>(n_in / QK8_0) * (QK8_0 + 4 + 4); }

// roundf(): halfway cases away from zero (the conversion instructions round them to even).
// p - trunc(p) is exact.
__m512 round_half_away(__m512 p) {
  const __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(p, t));
  const __mmask16 away = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_and_ps(p, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
  return _mm512_mask_add_ps(t, away, t, one);
}

// fp32 -> fp16 -> fp32 as the reference stores and reads back a scale (F16C rounds to nearest
// even like it; a NaN becomes NaN either way).
float through_fp16(float f) { return _cvtsh_ss(static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(f), 0)))); }

// The reference Q8_0 quantizer's levels and scale (quantize_8bit: d = max|x| / 127, levels
// round(x / d), NaNs skipped by the max), written straight into the activation row layout.
template <int kBias>
void prepare_activation(const float* x, int64_t n_in, void* out) {
  const int64_t nb = n_in / QK8_0;
  auto* qs = static_cast<int8_t*>(out);
  auto* d = reinterpret_cast<float*>(qs + nb * QK8_0);
  auto* offset = reinterpret_cast<int32_t*>(d + nb);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * QK8_0), v1 = _mm512_loadu_ps(x + b * QK8_0 + 16);
    // max_ps returns its second operand when the first is NaN: the running max skips NaNs.
    const __m512 amax = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
    const float scale = _mm512_reduce_max_ps(amax) / 127;
    const __m512 inverse = _mm512_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(round_half_away(_mm512_mul_ps(v0, inverse)));
    const __m512i q1 = _mm512_cvtps_epi32(round_half_away(_mm512_mul_ps(v1, inverse)));
    const __m128i l0 = _mm512_cvtepi32_epi8(q0), l1 = _mm512_cvtepi32_epi8(q1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * QK8_0), l0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * QK8_0 + 16), l1);
    d[b] = through_fp16(scale);
    // The sum of the stored bytes, not of q0/q1: a NaN converts to INT_MIN there (stored as 0),
    // and the int32 sum would overflow.
    offset[b] = -kBias * _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_cvtepi8_epi32(l0), _mm512_cvtepi8_epi32(l1)));
  }
}

// ---- Weights: per-format packing and unpacking ----

// unpack(levels, w): the 8 vectors of unsigned weight bytes of one block, all 16 rows, that pair
// with activation bytes 4k..4k+3 (k = 0..7). unpack_half(levels, h, w): the same for rows
// 8h..8h+7 only, in 256-bit vectors (decode: this CPU streams weights from DRAM faster with
// 256-bit loads and vpdpbusd).
struct Q8_0Rows {
  using Block = block_q8_0;
  static constexpr int kBias = 128;
  static constexpr size_t kLevelBytes = 512;  // per block and group
  static void pack_levels(const Block& src, int64_t r, uint8_t* dst) {
    for (int k = 0; k < 8; ++k) {
      for (int i = 0; i < 4; ++i) dst[64 * k + 4 * r + i] = static_cast<uint8_t>(src.qs[4 * k + i] ^ 0x80);
    }
  }
  static void unpack(const uint8_t* levels, __m512i* w) {
    for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(levels + 64 * k);
  }
  static void unpack_half(const uint8_t* levels, int h, __m256i* w) {
    for (int k = 0; k < 8; ++k) w[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(levels + 64 * k + 32 * h));
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
      const __m512i v = _mm512_loadu_si512(levels + 64 * k);
      w[k] = _mm512_and_si512(v, mask);
      w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
    }
  }
  static void unpack_half(const uint8_t* levels, int h, __m256i* w) {
    const __m256i mask = _mm256_set1_epi8(0x0f);
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(levels + 64 * k + 32 * h));
      w[k] = _mm256_and_si256(v, mask);
      w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
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

// Where a token's prepared activation row keeps block b's levels, float scale and int32 offset.
struct ActivationRow {
  const uint8_t* levels;
  const float* scales;
  const int32_t* offsets;
  ActivationRow(const uint8_t* row, int64_t nb)
      : levels(row),
        scales(reinterpret_cast<const float*>(row + static_cast<size_t>(nb) * QK8_0)),
        offsets(reinterpret_cast<const int32_t*>(scales + nb)) {}
  __m512i bytes(int64_t b, int k) const { return _mm512_set1_epi32(load_i32(levels + b * QK8_0 + 4 * k)); }
};

// The float step of every lane, the same in both kernels: acc += (d_w * d_a) * float(dot).
__m512 accumulate(__m512 acc, __m512 d_w, float d_a, __m512i dot) {
  return _mm512_fmadd_ps(_mm512_mul_ps(d_w, _mm512_set1_ps(d_a)), _mm512_cvtepi32_ps(dot), acc);
}

__m512 block_scales(const uint8_t* block, size_t level_bytes) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + level_bytes)));
}

// T tokens (activation rows a_row bytes apart) x one group: y[t * y_stride + r] for the rows in
// `store` (a lane mask). The loops over tokens and levels are unrolled so that the accumulators
// live in registers; each token's integer dot is one chain of 8 vpdpbusd.
template <typename W, int T>
void group_tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                  __mmask16 store) {
  __m512 acc[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes<W>;
    __m512i w[8];
    W::unpack(block, w);
    const __m512 d_w = block_scales(block, W::kLevelBytes);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const ActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
      __m512i dot = _mm512_set1_epi32(act.offsets[b]);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) dot = _mm512_dpbusd_epi32(dot, w[k], act.bytes(b, k));
      acc[t] = accumulate(acc[t], d_w, act.scales[b], dot);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, store, acc[t]);
}

// One token x one group (decode, reading weights from DRAM): the integer dots in two 256-bit
// halves (rows 0-7, 8-15), which this CPU streams faster; the same exact integers and float steps.
template <typename W>
void group_one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
  const ActivationRow act(a, nb);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes<W>;
    __m256i lo[8], hi[8];
    W::unpack_half(block, 0, lo);
    W::unpack_half(block, 1, hi);
    __m256i dot_lo = _mm256_set1_epi32(act.offsets[b]), dot_hi = dot_lo;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m256i bytes = _mm256_set1_epi32(load_i32(act.levels + b * QK8_0 + 4 * k));
      dot_lo = _mm256_dpbusd_epi32(dot_lo, lo[k], bytes);
      dot_hi = _mm256_dpbusd_epi32(dot_hi, hi[k], bytes);
    }
    const __m512i dot = _mm512_inserti64x4(_mm512_castsi256_si512(dot_lo), dot_hi, 1);
    acc = accumulate(acc, block_scales(block, W::kLevelBytes), act.scales[b], dot);
  }
  _mm512_mask_storeu_ps(y, store, acc);
}

// group_tokens<W, n_t> for a run-time n_t in [2, kTokens].
template <typename W, int T = kTokens>
void with_token_count(int64_t n_t, int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y,
                      int64_t y_stride, __mmask16 store) {
  if constexpr (T >= 2) {
    if (n_t == T) return group_tokens<W, T>(nb, group, a, a_row, y, y_stride, store);
    with_token_count<W, T - 1>(n_t, nb, group, a, a_row, y, y_stride, store);
  }
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
      if (n_t == 1) {
        group_one_token<W>(nb, group, a_t, y_g, store);
      } else {
        with_token_count<W>(n_t, nb, group, a_t, a_row, y_g, y_stride, store);
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
