// Row-group kernels for Q8_0 / Q4_0 weights (layouts in row_groups.hpp). The inner loop is, per
// block and token, 8 `vpdpbusd` (16 rows x 4 levels each) with the activation's 4 bytes broadcast
// from memory, then one convert, one multiply and one FMA. Up to kTokens tokens share each
// block's unpacked weights; their float accumulators stay in registers across the row.
#include "kernels/avx512/row_groups.hpp"

#include "kernels/avx512/row_group_driver.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx512 {
namespace {

// ---- Activations: Q8_0 levels, float scales, int32 offsets ----

size_t q8_0_activation_bytes(int64_t n_in) { return static_cast<size_t>(n_in / QK8_0) * (QK8_0 + 4 + 4); }

// roundf(): halfway cases away from zero (the conversion instructions round them to even).
// p - trunc(p) is exact.
__m512 round_half_away(__m512 p) {
  const __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(p, t));
  const __mmask16 away = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_and_ps(p, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
  return _mm512_mask_add_ps(t, away, t, one);
}

// round(p) as int32; a NaN (from a NaN or infinite input, whose level the reference leaves
// undefined) gives level 0.
__m512i level_of(__m512 p) {
  const __mmask16 ordered = _mm512_cmp_ps_mask(p, p, _CMP_ORD_Q);
  return _mm512_cvtps_epi32(round_half_away(_mm512_maskz_mov_ps(ordered, p)));
}

// fp32 -> fp16 -> fp32 as the reference stores and reads back a scale (F16C rounds to nearest
// even like it; a NaN becomes NaN either way).
float through_fp16(float f) {
  return _cvtsh_ss(static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(f), 0))));
}

// The reference Q8_0 quantizer's levels and scale (quantize_8bit: d = max|x| / 127, levels
// round(x / d), NaNs skipped by the max), written straight into the activation row layout. The
// last word of a block is the offset -kBias * sum(levels), or with kSums (Q8_1, for the affine
// formats Q4_1 and Q5_1, whose min meets the activations only through it) the float
// s = fp16(sum(levels) * d) of the reference Q8_1 quantizer (d unrounded).
template <int kBias, bool kSums = false>
void prepare_q8_0(const float* x, int64_t n_in, void* out) {
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
    const __m512i q0 = level_of(_mm512_mul_ps(v0, inverse)), q1 = level_of(_mm512_mul_ps(v1, inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * QK8_0), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * QK8_0 + 16), _mm512_cvtepi32_epi8(q1));
    d[b] = through_fp16(scale);
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    if constexpr (kSums) {
      const float s = through_fp16(static_cast<float>(sum) * scale);
      std::memcpy(&offset[b], &s, sizeof(s));
    } else {
      offset[b] = -kBias * sum;
    }
  }
}

// bitnet.cpp's per-token I8_S activations (the scalar quantize_i8_s: s = 127 / max(1e-5, max|x|),
// levels nearest-even, clamped) in the Q8_0 row layout: per 32 values the levels, a unit scale
// and the offset -sum(levels); after them the token's float s.
size_t i8_s_activation_bytes(int64_t n_in) { return q8_0_activation_bytes(n_in) + sizeof(float); }

void prepare_i8_s(const float* x, int64_t n_in, void* out) {
  const int64_t nb = n_in / QK8_0;
  auto* qs = static_cast<int8_t*>(out);
  auto* d = reinterpret_cast<float*>(qs + nb * QK8_0);
  auto* offset = reinterpret_cast<int32_t*>(d + nb);
  auto* s_out = reinterpret_cast<float*>(offset + nb);
  __m512 amax = _mm512_set1_ps(1e-5f);
  for (int64_t i = 0; i < n_in; i += 16) amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), amax);
  const float s = 127.0f / _mm512_reduce_max_ps(amax);
  const __m512 scale = _mm512_set1_ps(s);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i q[2];
    for (int h = 0; h < 2; ++h) {
      const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x + b * QK8_0 + 16 * h), scale);
      const __mmask16 ordered = _mm512_cmp_ps_mask(p, p, _CMP_ORD_Q);
      const __m512 clamped = _mm512_min_ps(_mm512_max_ps(_mm512_maskz_mov_ps(ordered, p), _mm512_set1_ps(-128.0f)),
                                           _mm512_set1_ps(127.0f));
      q[h] = _mm512_cvtps_epi32(clamped);  // round to nearest even, as lrint
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + b * QK8_0 + 16 * h), _mm512_cvtepi32_epi8(q[h]));
    }
    d[b] = 1.0f;
    offset[b] = -_mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
  }
  *s_out = s;
}

// ---- Weights: per-format packing and unpacking ----

// unpack<Vec>(levels, h, w): the 8 vectors of unsigned weight bytes of one block that pair with
// activation bytes 4k..4k+3 (k = 0..7), for all 16 rows (Zmm) or rows 8h..8h+7 (Ymm).
struct Q8_0Levels {
  using Block = block_q8_0;
  static constexpr int kBias = 128;
  static constexpr size_t kLevelBytes = 512;  // per block and group
  static void pack_levels(const Block& src, int64_t r, uint8_t* dst) {
    for (int k = 0; k < 8; ++k) {
      for (int i = 0; i < 4; ++i) dst[64 * k + 4 * r + i] = static_cast<uint8_t>(src.qs[4 * k + i] ^ 0x80);
    }
  }
  template <typename Vec>
  static void unpack(const uint8_t* levels, int h, typename Vec::V* w) {
    for (int k = 0; k < 8; ++k) w[k] = Vec::load(levels + 64 * k, h);
  }
};

// Q4_0's and Q4_1's nibbles (the same qs layout); kBias 8 for Q4_0, 0 for Q4_1's unsigned levels.
template <typename B, int kBiasOf>
struct NibbleLevels {
  using Block = B;
  static constexpr int kBias = kBiasOf;
  static constexpr size_t kLevelBytes = 256;
  static void pack_levels(const Block& src, int64_t r, uint8_t* dst) {
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < 4; ++i) dst[64 * k + 4 * r + i] = src.qs[4 * k + i];
    }
  }
  template <typename Vec>
  static void unpack(const uint8_t* levels, int h, typename Vec::V* w) {
    const auto mask = Vec::set1(0x0f);
    for (int k = 0; k < 4; ++k) {
      const auto v = Vec::load(levels + 64 * k, h);
      w[k] = Vec::and_(v, mask);
      w[k + 4] = Vec::and_(Vec::template shift_right16<4>(v), mask);
    }
  }
};
using Q4_0Levels = NibbleLevels<block_q4_0, 8>;

// Q4_0's nibbles, then one 64-byte chunk of fifth bits: byte 4r + i holds in bit k the fifth bit of
// level 4k + i (ggml's qh bit 4k + i). Q5_0: levels 0..31 stand for q + 16; Q5_1: kBias 0.
template <typename B, int kBiasOf>
struct FiveBitLevels {
  using Block = B;
  static constexpr int kBias = kBiasOf;
  static constexpr size_t kLevelBytes = 256 + 64;
  static void pack_levels(const Block& src, int64_t r, uint8_t* dst) {
    uint32_t qh;
    std::memcpy(&qh, src.qh, sizeof(qh));
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < 4; ++i) dst[64 * k + 4 * r + i] = src.qs[4 * k + i];
    }
    for (int i = 0; i < 4; ++i) {
      uint8_t bits = 0;
      for (int k = 0; k < 8; ++k) bits = static_cast<uint8_t>(bits | ((qh >> (4 * k + i)) & 1) << k);
      dst[256 + 4 * r + i] = bits;
    }
  }
  template <typename Vec>
  static void unpack(const uint8_t* levels, int h, typename Vec::V* w) {
    Q4_0Levels::unpack<Vec>(levels, h, w);
    const auto high = Vec::load(levels + 256, h);
    w[0] = Vec::or_(w[0], fifth_bit<Vec, 0>(high));
    w[1] = Vec::or_(w[1], fifth_bit<Vec, 1>(high));
    w[2] = Vec::or_(w[2], fifth_bit<Vec, 2>(high));
    w[3] = Vec::or_(w[3], fifth_bit<Vec, 3>(high));
    w[4] = Vec::or_(w[4], fifth_bit<Vec, 4>(high));
    w[5] = Vec::or_(w[5], fifth_bit<Vec, 5>(high));
    w[6] = Vec::or_(w[6], fifth_bit<Vec, 6>(high));
    w[7] = Vec::or_(w[7], fifth_bit<Vec, 7>(high));
  }
};
using Q5_0Levels = FiveBitLevels<block_q5_0, 16>;

// Whether a block format is affine (value = q * d + m: Q4_1, Q5_1), i.e. has a per-block min.
template <typename Block>
constexpr bool kAffine = requires(const Block& b) { b.m; };

// ---- The kernel ----

// Where a token's prepared activation row keeps block b's levels, float scale and int32 offset.
struct ActivationRow {
  const uint8_t* levels;
  const float* scales;
  const int32_t* offsets;  // symmetric formats: -bias * sum(levels)
  const float* sums;       // affine formats: Q8_1's s (the same words)
  ActivationRow(const uint8_t* row, int64_t nb)
      : levels(row),
        scales(reinterpret_cast<const float*>(row + static_cast<size_t>(nb) * QK8_0)),
        offsets(reinterpret_cast<const int32_t*>(scales + nb)),
        sums(scales + nb) {}
  // The integer dot's starting value.
  template <bool kAffineBlock>
  int32_t start(int64_t b) const {
    return kAffineBlock ? 0 : offsets[b];
  }
  __m512i bytes(int64_t b, int k) const { return _mm512_set1_epi32(load_i32(levels + b * QK8_0 + 4 * k)); }
};

// The exact int32 dots of one 32-value activation block qb against 16 rows, from `start`: w[k]
// holds the rows' unsigned levels of values 4k..4k+3 (Zmm), or rows 0-7 / 8-15 (Ymm lo, hi).
inline __m512i block_dot(const __m512i* w, const ActivationRow& act, int64_t qb, int32_t start) {
  __m512i dot = _mm512_set1_epi32(start);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) dot = _mm512_dpbusd_epi32(dot, w[k], act.bytes(qb, k));
  return dot;
}
inline __m512i block_dot(const __m256i* lo, const __m256i* hi, const ActivationRow& act, int64_t qb, int32_t start) {
  __m256i dot_lo = _mm256_set1_epi32(start), dot_hi = dot_lo;
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    const __m256i bytes = _mm256_set1_epi32(load_i32(act.levels + qb * QK8_0 + 4 * k));
    dot_lo = _mm256_dpbusd_epi32(dot_lo, lo[k], bytes);
    dot_hi = _mm256_dpbusd_epi32(dot_hi, hi[k], bytes);
  }
  return _mm512_inserti64x4(_mm512_castsi256_si512(dot_lo), dot_hi, 1);
}

// A format of 32-element blocks with one fp16 scale (and, affine, one fp16 min): Levels packs and
// unpacks the levels; each packed block is the levels of the 16 rows, then their 16 fp16 scales
// (then their 16 fp16 mins).
template <typename Levels>
struct Block32Rows {
  using Block = typename Levels::Block;
  static constexpr bool kMins = kAffine<Block>;
  static constexpr int64_t kBlockElems = 32;
  static constexpr size_t kScaleBytes = kRows * sizeof(uint16_t);
  static constexpr size_t kBlockBytes = Levels::kLevelBytes + (kMins ? 2 : 1) * kScaleBytes;
  static constexpr int kTokens = 16;

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    Levels::pack_levels(src, r, dst);
    std::memcpy(dst + Levels::kLevelBytes + r * sizeof(uint16_t), &src.d, sizeof(uint16_t));
    if constexpr (kMins) std::memcpy(dst + Levels::kLevelBytes + kScaleBytes + r * sizeof(uint16_t), &src.m, sizeof(uint16_t));
  }
  static size_t activation_bytes(int64_t n_in) { return q8_0_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) {
    if constexpr (kMins) {
      prepare_q8_0<0, true>(x, n_in, out);
    } else {
      prepare_q8_0<Levels::kBias>(x, n_in, out);
    }
  }
  // The rows' scales d_w and (affine) mins m_w of a packed block.
  static __m512 scales_of(const uint8_t* block) { return row_scales(block + Levels::kLevelBytes); }
  static __m512 mins_of(const uint8_t* block) {
    return kMins ? row_scales(block + Levels::kLevelBytes + kScaleBytes) : _mm512_setzero_ps();
  }
  // acc = fma(d_w * d_a, float(dot), acc), then for affine blocks acc = fma(m_w, s_a, acc).
  static __m512 block_step(__m512 acc, __m512 d_w, __m512 m_w, const ActivationRow& act, int64_t b, __m512i dot) {
    acc = accumulate(acc, d_w, act.scales[b], dot);
    if constexpr (kMins) acc = _mm512_fmadd_ps(m_w, _mm512_set1_ps(act.sums[b]), acc);
    return acc;
  }

  // T tokens (activation rows a_row bytes apart) x one group: y[t * y_stride + r] for the rows
  // in `store` (a lane mask). The loops over tokens and levels are unrolled so that the
  // accumulators live in registers; each token's integer dot is one chain of 8 vpdpbusd.
  template <int T>
  static void tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                     __mmask16 store) {
    over_blocks<T>(nb, y, y_stride, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      __m512i w[8];
      Levels::template unpack<Zmm>(block, 0, w);
      const __m512 d_w = scales_of(block), m_w = mins_of(block);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const ActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
        acc[t] = block_step(acc[t], d_w, m_w, act, b, block_dot(w, act, b, act.start<kMins>(b)));
      }
    });
  }

  // One token x one group (decode, reading weights from DRAM): the integer dots in two 256-bit
  // halves (rows 0-7, 8-15); the same exact integers and float steps as tokens<T>.
  static void one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
    const ActivationRow act(a, nb);
    over_blocks<1>(nb, y, 0, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      prefetch_ahead<kBlockBytes>(block);
      __m256i lo[8], hi[8];
      Levels::template unpack<Ymm>(block, 0, lo);
      Levels::template unpack<Ymm>(block, 1, hi);
      acc[0] = block_step(acc[0], scales_of(block), mins_of(block), act, b, block_dot(lo, hi, act, b, act.start<kMins>(b)));
    });
  }
};

// I2_S (bitnet.cpp's x86 layout): 128-value blocks of 2-bit codes 0..2 for -1..1 (3 reads as +2,
// as bitnet.cpp's dot treats it), byte g holding values g, g+32, g+64, g+96 in bits 7-6, 5-4, 3-2,
// 1-0; no block scale (one per tensor, which the matmul applies to each result). Packed block of
// 16 rows, 512 bytes: per 32-value group j, two 64-byte chunks whose byte 4r + i holds in bits
// 2s..2s+1 the code of row r's value 32j + 4(c + 2s) + i (the group's run c + 2s). Each group meets
// one 32-value group of the I8_S activations: dot = -sum(a) + sum(code * a), acc += float(dot)
// (every partial sum is an integer below 2^24, so exact), and at the end y = acc / s: bitnet.cpp's
// (float)sum((code - 1) * a) / s bit for bit.
struct block_i2_s {
  uint8_t qs[32];
};

struct I2SRows {
  using Block = block_i2_s;
  static constexpr int64_t kBlockElems = 128;
  static constexpr size_t kGroupBytes = 128;
  static constexpr size_t kBlockBytes = 4 * kGroupBytes;
  static constexpr int kTokens = 16;

  static int code(const Block& b, int e) { return (b.qs[e % 32] >> (6 - 2 * (e / 32))) & 3; }
  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    for (int j = 0; j < 4; ++j) {
      for (int c = 0; c < 2; ++c) {
        for (int i = 0; i < 4; ++i) {
          int byte = 0;
          for (int s = 0; s < 4; ++s) byte |= code(src, 32 * j + 4 * (c + 2 * s) + i) << (2 * s);
          dst[kGroupBytes * j + 64 * c + 4 * r + i] = static_cast<uint8_t>(byte);
        }
      }
    }
  }
  // The 8 runs (w[k]: values 4k..4k+3) of one 32-value group, codes 0..3 as bytes.
  template <typename Vec>
  static void unpack(const uint8_t* group, int h, typename Vec::V* w) {
    const auto mask = Vec::set1(3);
    for (int c = 0; c < 2; ++c) {
      const auto v = Vec::load(group + 64 * c, h);
      w[c] = Vec::and_(v, mask);
      w[c + 2] = Vec::and_(Vec::template shift_right16<2>(v), mask);
      w[c + 4] = Vec::and_(Vec::template shift_right16<4>(v), mask);
      w[c + 6] = Vec::and_(Vec::template shift_right16<6>(v), mask);
    }
  }
  static size_t activation_bytes(int64_t n_in) { return i8_s_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) { prepare_i8_s(x, n_in, out); }
  static __m512 group_step(__m512 acc, const ActivationRow&, int64_t, __m512i dot) {
    return _mm512_add_ps(acc, _mm512_cvtepi32_ps(dot));
  }
  // y = acc / s for the token whose activation row is `a` (16 rows, `store` of them valid).
  static void divide(float* y, const uint8_t* a, int64_t n_in, __mmask16 store) {
    float s;
    std::memcpy(&s, a + q8_0_activation_bytes(n_in), sizeof(s));
    _mm512_mask_storeu_ps(y, store, _mm512_div_ps(_mm512_maskz_loadu_ps(store, y), _mm512_set1_ps(s)));
  }

  template <int T>
  static void tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                     __mmask16 store) {
    over_blocks<T>(nb, y, y_stride, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      for (int j = 0; j < 4; ++j) {
        __m512i w[8];
        unpack<Zmm>(block + kGroupBytes * j, 0, w);
        const int64_t qb = 4 * b + j;  // the activations' 32-value group
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          const ActivationRow act(a + static_cast<size_t>(t) * a_row, 4 * nb);
          acc[t] = group_step(acc[t], act, qb, block_dot(w, act, qb, act.offsets[qb]));
        }
      }
    });
    for (int t = 0; t < T; ++t) divide(y + t * y_stride, a + static_cast<size_t>(t) * a_row, nb * kBlockElems, store);
  }

  static void one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
    const ActivationRow act(a, 4 * nb);
    over_blocks<1>(nb, y, 0, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * kBlockBytes;
      prefetch_ahead<kBlockBytes>(block);
      for (int j = 0; j < 4; ++j) {
        const int64_t qb = 4 * b + j;
        __m256i lo[8], hi[8];
        unpack<Ymm>(block + kGroupBytes * j, 0, lo);
        unpack<Ymm>(block + kGroupBytes * j, 1, hi);
        acc[0] = group_step(acc[0], act, qb, block_dot(lo, hi, act, qb, act.offsets[qb]));
      }
    });
    divide(y, a, nb * kBlockElems, store);
  }
};

}  // namespace

RowGroupKernels i2_s_row_groups() { return make_row_groups<I2SRows>(); }
RowGroupKernels q8_0_row_groups() { return make_row_groups<Block32Rows<Q8_0Levels>>(); }
RowGroupKernels q4_0_row_groups() { return make_row_groups<Block32Rows<Q4_0Levels>>(); }
RowGroupKernels q5_0_row_groups() { return make_row_groups<Block32Rows<Q5_0Levels>>(); }
RowGroupKernels q4_1_row_groups() { return make_row_groups<Block32Rows<NibbleLevels<block_q4_1, 0>>>(); }
RowGroupKernels q5_1_row_groups() { return make_row_groups<Block32Rows<FiveBitLevels<block_q5_1, 0>>>(); }

}  // namespace okapi::quant::avx512
