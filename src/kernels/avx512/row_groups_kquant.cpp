// Row-group kernels for K-quant weights against Q8_K activations, super-blocks of 256 levels.
// Per super-block, token and group of 16 rows, each sub-block's exact integer dot comes from
// `vpdpbusd` over unsigned levels and is folded into an exact int32 super-block sum by one
// `vpmulld` by the rows' sub-block scales; then a convert, a multiply and an FMA into the lane.
//   Q6_K: 16 sub-blocks of 16, int8 scales; the level offset -32 enters through the activation
//         (the dot starts from -32 * sum(a) of the sub-block).
//   Q4_K, Q5_K: 8 sub-blocks of 32, 6-bit scales and mins; the mins term sum_j m_j * sum(a_j)
//         is a second int32 sum (vpdpwssd of int16 pairs), subtracted with dmin in a second FMA.
//   Q3_K: 16 sub-blocks of 16, signed 6-bit scales, levels q + 4 in 0..7; the -4 enters through
//         the activation (the dot starts from -4 * sum(a) of the sub-block).
//   Q2_K: 16 sub-blocks of 16, 4-bit scales and mins, levels 0..3; the mins as Q4_K's over 16.
#include <type_traits>

#include "kernels/avx512/q8_k_activation.hpp"
#include "kernels/avx512/row_group_driver.hpp"
#include "kernels/avx512/row_groups.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx512 {
namespace {

// ---- The kernel, for any K-quant layout F ----
//   F::kSub sub-blocks of F::kRuns 4-level runs, taken two at a time: F::unpack_pair<Vec>(block,
//   p, h, w) the levels of sub-blocks 2p (w[0, kRuns)) and 2p + 1 (w[kRuns, 2 kRuns)), which
//   share their packed chunks; F::scales_of(j) the offset of the rows' 8-bit sub-block scales
//   (signed if F::kSignedScales); F::start(act, b, j) the int32 a sub-block's dot starts from;
//   F::finish(acc, block, d_a, sum, act, b) the float step of a super-block from its int32
//   sum_j scale_j * dot_j.
template <typename F>
struct SuperBlockRows : F {
  static_assert(F::kSub % 2 == 0);
  static __m512i scales512(const uint8_t* block, int64_t j) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + F::scales_of(j)));
    return F::kSignedScales ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
  }
  static __m256i scales256(const uint8_t* block, int64_t j, int h) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + F::scales_of(j) + 8 * h));
    return F::kSignedScales ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
  }

  // T tokens x one group: per super-block an exact int32 sum per (row, token), then F::finish.
  template <int T>
  static void tokens(int64_t nb, const uint8_t* group, const uint8_t* a, size_t a_row, float* y, int64_t y_stride,
                     __mmask16 store) {
    over_blocks<T>(nb, y, y_stride, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * F::kBlockBytes;
      __m512i sum[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
      for (int64_t p = 0; p < F::kSub / 2; ++p) {
        __m512i w[2 * F::kRuns];
        F::template unpack_pair<Zmm>(block, p, 0, w);
#pragma GCC unroll 2
        for (int64_t i = 0; i < 2; ++i) {
          const int64_t j = 2 * p + i;
          const __m512i scale = scales512(block, j);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) {
            const KActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
            __m512i dot = _mm512_set1_epi32(F::start(act, b, j));
#pragma GCC unroll 8
            for (int k = 0; k < F::kRuns; ++k)
              dot = _mm512_dpbusd_epi32(dot, w[F::kRuns * i + k], act.bytes(b, F::kRuns * j + k));
            sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(dot, scale));
          }
        }
      }
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const KActivationRow act(a + static_cast<size_t>(t) * a_row, nb);
        acc[t] = F::finish(acc[t], block, act.scales[b], sum[t], act, b);
      }
    });
  }

  // One token x one group (decode, reading weights from DRAM): the integer sums in two 256-bit
  // halves (rows 0-7, 8-15), which this CPU streams faster; the same integers and float steps.
  // Each dot runs as two chains (even and odd runs): exact integers, so the order is free.
  static void one_token(int64_t nb, const uint8_t* group, const uint8_t* a, float* y, __mmask16 store) {
    const KActivationRow act(a, nb);
    over_blocks<1>(nb, y, 0, store, [&](int64_t b, __m512* acc) {
      const uint8_t* block = group + static_cast<size_t>(b) * F::kBlockBytes;
      const uint8_t* levels = act.levels + b * QK_K;
      prefetch_ahead<F::kBlockBytes>(block);
      __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int64_t p = 0; p < F::kSub / 2; ++p) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m256i w[2 * F::kRuns];
          F::template unpack_pair<Ymm>(block, p, h, w);
#pragma GCC unroll 2
          for (int64_t i = 0; i < 2; ++i) {
            const int64_t j = 2 * p + i;
            __m256i dot[2] = {_mm256_set1_epi32(F::start(act, b, j)), _mm256_setzero_si256()};
#pragma GCC unroll 8
            for (int k = 0; k < F::kRuns; ++k) {
              dot[k % 2] = _mm256_dpbusd_epi32(dot[k % 2], w[F::kRuns * i + k],
                                               _mm256_set1_epi32(load_i32(levels + 4 * (F::kRuns * j + k))));
            }
            sum[h] = _mm256_add_epi32(sum[h],
                                      _mm256_mullo_epi32(_mm256_add_epi32(dot[0], dot[1]), scales256(block, j, h)));
          }
        }
      }
      const __m512i total = _mm512_inserti64x4(_mm512_castsi256_si512(sum[0]), sum[1], 1);
      acc[0] = F::finish(acc[0], block, act.scales[b], total, act, b);
    });
  }
};

// ---- Q6_K ----

// Packed super-block of 16 rows, 3360 bytes (210 per row, the size of a block_q6_K), read front
// to back: for each pair of sub-blocks (2p, 2p+1), 416 bytes: for each of the two sub-blocks j
// (16 levels, 4-level runs 4j .. 4j+3), three 64-byte chunks X, Y, Z, byte 4r + i of each holding
// row r's level i of run 4j, 4j+1, 4j+2 in its low 6 bits and two bits of run 4j+3's level in
// its top 2 (X: bits 0-1, Y: bits 2-3, Z: bits 4-5); then the int8 scales of both sub-blocks
// (sub-block 2p for rows 0..15, then 2p+1). After the 8 pairs, the 16 rows' fp16 d.
struct Q6_KFormat {
  using Block = block_q6_K;
  static constexpr int64_t kBlockElems = QK_K;
  static constexpr size_t kPairBytes = 2 * 3 * 64 + 2 * kRows;
  static constexpr size_t kDOffset = kSubBlocks / 2 * kPairBytes;
  static constexpr size_t kBlockBytes = kDOffset + kRows * sizeof(uint16_t);
  static constexpr int kTokens = 8;
  static constexpr int64_t kSub = kSubBlocks, kRuns = 4;
  static constexpr bool kSignedScales = true;

  static size_t chunks_of(int64_t j) {
    return kPairBytes * static_cast<size_t>(j / 2) + 192 * static_cast<size_t>(j % 2);
  }
  static size_t scales_of(int64_t j) {
    return kPairBytes * static_cast<size_t>(j / 2) + 384 + kRows * static_cast<size_t>(j % 2);
  }

  // Level e (0..63) of a block: as ggml's dequantize_row_q6_K lays them out.
  static int level(const Block& b, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int low = (b.ql[h * 64 + (k % 2) * 32 + l] >> (4 * (k / 2))) & 0xF;
    const int high = (b.qh[h * 32 + l] >> (2 * k)) & 3;
    return low | (high << 4);
  }

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    for (int j = 0; j < kSubBlocks; ++j) {
      uint8_t* chunks = dst + chunks_of(j) + 4 * r;
      for (int i = 0; i < 4; ++i) {
        const int top = level(src, 16 * j + 12 + i);
        for (int c = 0; c < 3; ++c) {
          chunks[64 * c + i] = static_cast<uint8_t>(level(src, 16 * j + 4 * c + i) | (((top >> (2 * c)) & 3) << 6));
        }
      }
      dst[scales_of(j) + r] = static_cast<uint8_t>(src.scales[j]);
    }
    std::memcpy(dst + kDOffset + r * sizeof(uint16_t), &src.d, sizeof(uint16_t));
  }

  // The 4 vectors of levels (0..63) of sub-block j, runs 4j .. 4j+3, for all 16 rows (Zmm) or
  // rows 8h .. 8h+7 (Ymm).
  template <typename Vec>
  static void unpack(const uint8_t* block, int64_t j, int h, typename Vec::V* w) {
    const uint8_t* chunks = block + chunks_of(j);
    const auto x = Vec::load(chunks, h), y = Vec::load(chunks + 64, h), z = Vec::load(chunks + 128, h);
    const auto low6 = Vec::set1(0x3f);
    w[0] = Vec::and_(x, low6);
    w[1] = Vec::and_(y, low6);
    w[2] = Vec::and_(z, low6);
    // Top bits of each byte down to bits 0-1 / 2-3 / 4-5 (16-bit shifts: the masks drop what
    // the neighbouring byte shifts in).
    const auto b01 = Vec::and_(Vec::template shift_right16<6>(x), Vec::set1(0x03));
    const auto b23 = Vec::and_(Vec::template shift_right16<4>(y), Vec::set1(0x0c));
    const auto b45 = Vec::and_(Vec::template shift_right16<2>(z), Vec::set1(0x30));
    w[3] = Vec::or_(Vec::or_(b01, b23), b45);
  }

  template <typename Vec>
  static void unpack_pair(const uint8_t* block, int64_t p, int h, typename Vec::V* w) {
    unpack<Vec>(block, 2 * p, h, w);
    unpack<Vec>(block, 2 * p + 1, h, w + kRuns);
  }

  static size_t activation_bytes(int64_t n_in) { return q8_K_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) { prepare_q8_K<Sums::q6_K>(x, n_in, out); }

  // A sub-block's dot starts from -32 * sum(a): the stored levels are q + 32.
  static int32_t start(const KActivationRow& act, int64_t b, int64_t j) { return act.offset(b, j); }
  static __m512 finish(__m512 acc, const uint8_t* block, float d_a, __m512i sum, const KActivationRow&, int64_t) {
    return accumulate(acc, row_scales(block + kDOffset), d_a, sum);
  }
};

// ---- The mins term of Q4_K, Q5_K and Q2_K ----
// F::kSub / 2 pairs of sub-blocks; F's mins as bytes [pair][row][2] at F::kMinsOffset; its fp16 d
// and dmin at F::kDOffset, F::kDminOffset; the token's words 0 .. kSub/2 - 1 the int16 pairs of the
// matching sums of the activations. sum_j min_j * sum(a_j) for the 16 rows: the mins widened to
// int16 pairs, one vpdpwssd per pair; then
//   acc += (d_w * d_a) * float(sum_j scale_j * dot_j) - (dmin_w * d_a) * float(sum_j min_j * sum(a_j)).
template <typename F>
__m512 finish_with_mins(__m512 acc, const uint8_t* block, float d_a, __m512i scaled, const KActivationRow& act,
                        int64_t b) {
  const int32_t* pairs = act.offsets + b * kSubBlocks;
  __m512i mins_sum = _mm512_setzero_si512();
  for (int p = 0; p < F::kSub / 2; ++p) {
    const __m512i mins =
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + F::kMinsOffset + 32 * p)));
    mins_sum = _mm512_dpwssd_epi32(mins_sum, mins, _mm512_set1_epi32(pairs[p]));
  }
  acc = accumulate(acc, row_scales(block + F::kDOffset), d_a, scaled);
  const __m512 dmin = _mm512_mul_ps(row_scales(block + F::kDminOffset), _mm512_set1_ps(d_a));
  return _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(mins_sum), acc);
}

// ---- Q4_K and Q5_K ----

// Packed super-block of 16 rows: for each pair of sub-blocks (2j, 2j+1), 8 chunks of 64 bytes,
// byte 4r + i of chunk k holding row r's level i of run 16j + k (sub-block 2j) in its low nibble
// and of run 16j + 8 + k (sub-block 2j+1) in its high one, as ggml's qs[32j + 4k + i]; Q5_K then
// adds 2 chunks of the fifth bits: byte 4r + i of chunk c holds, for the runs k = 4c + m
// (m = 0..3), the fifth bit of sub-block 2j's level 4k + i in bit 2m and of sub-block 2j+1's in
// bit 2m + 1 (as ggml's qh[4k + i] bits 2j, 2j+1). After the pairs: the 6-bit scales as bytes,
// [sub-block][row]; the mins as bytes, [pair p][row][2] (sub-blocks 2p, 2p+1: the int16 pairs of
// vpdpwssd once widened); the 16 fp16 d; the 16 fp16 dmin. 148 bytes per row (a block_q4_K is
// 144), 180 for Q5_K (176).
template <typename B>
struct KMinFormat {
  using Block = B;
  static constexpr bool kFifthBit = std::is_same_v<B, block_q5_K>;
  static constexpr int64_t kBlockElems = QK_K;
  static constexpr int64_t kSub = QK_K / 32;
  static constexpr size_t kPairBytes = 8 * 64 + (kFifthBit ? 2 * 64 : 0);
  static constexpr size_t kScalesOffset = kSub / 2 * kPairBytes;
  static constexpr size_t kMinsOffset = kScalesOffset + kSub * kRows;
  static constexpr size_t kDOffset = kMinsOffset + kSub * kRows;
  static constexpr size_t kDminOffset = kDOffset + kRows * sizeof(uint16_t);
  static constexpr size_t kBlockBytes = kDminOffset + kRows * sizeof(uint16_t);
  static constexpr int kTokens = 8;
  static constexpr int64_t kRuns = 8;
  static constexpr bool kSignedScales = false;
  static size_t scales_of(int64_t j) { return kScalesOffset + kRows * static_cast<size_t>(j); }

  // The 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
  static void scale_min(const Block& b, int j, uint8_t* scale, uint8_t* min) {
    const uint8_t* q = b.scales;
    *scale = static_cast<uint8_t>(j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>(j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    for (int j = 0; j < kSub / 2; ++j) {
      uint8_t* pair = dst + kPairBytes * j;
      for (int k = 0; k < 8; ++k) std::memcpy(pair + 64 * k + 4 * r, src.qs + 32 * j + 4 * k, 4);
      if constexpr (kFifthBit) {
        for (int k = 0; k < 8; ++k) {
          for (int i = 0; i < 4; ++i) {
            const int bits = (src.qh[4 * k + i] >> (2 * j)) & 3;
            pair[512 + 64 * (k / 4) + 4 * r + i] |= static_cast<uint8_t>(bits << (2 * (k % 4)));
          }
        }
      }
    }
    for (int j = 0; j < kSub; ++j) {
      scale_min(src, j, &dst[scales_of(j) + r], &dst[kMinsOffset + 2 * kRows * (j / 2) + 2 * r + j % 2]);
    }
    std::memcpy(dst + kDOffset + r * sizeof(uint16_t), &src.d, sizeof(uint16_t));
    std::memcpy(dst + kDminOffset + r * sizeof(uint16_t), &src.dmin, sizeof(uint16_t));
  }

  // The 8 vectors of levels (0..15, Q5_K 0..31) of sub-blocks 2p (w[0..7]) and 2p + 1 (w[8..15]),
  // for all 16 rows (Zmm) or rows 8h .. 8h+7 (Ymm): each chunk is loaded once for both.
  template <typename Vec>
  static void unpack_pair(const uint8_t* block, int64_t p, int h, typename Vec::V* w) {
    const uint8_t* pair = block + kPairBytes * static_cast<size_t>(p);
    const auto mask = Vec::set1(0x0f);
    for (int k = 0; k < 8; ++k) {
      const auto v = Vec::load(pair + 64 * k, h);
      w[k] = Vec::and_(v, mask);
      w[8 + k] = Vec::and_(Vec::template shift_right16<4>(v), mask);
    }
    if constexpr (kFifthBit) {
      const typename Vec::V high[2] = {Vec::load(pair + 512, h), Vec::load(pair + 576, h)};
      with_fifth_bits<Vec, 0>(high, w);
      with_fifth_bits<Vec, 1>(high, w + 8);
    }
  }
  template <typename Vec, int kOdd>
  static void with_fifth_bits(const typename Vec::V* high, typename Vec::V* w) {
    w[0] = Vec::or_(w[0], fifth_bit<Vec, 0 + kOdd>(high[0]));
    w[1] = Vec::or_(w[1], fifth_bit<Vec, 2 + kOdd>(high[0]));
    w[2] = Vec::or_(w[2], fifth_bit<Vec, 4 + kOdd>(high[0]));
    w[3] = Vec::or_(w[3], fifth_bit<Vec, 6 + kOdd>(high[0]));
    w[4] = Vec::or_(w[4], fifth_bit<Vec, 0 + kOdd>(high[1]));
    w[5] = Vec::or_(w[5], fifth_bit<Vec, 2 + kOdd>(high[1]));
    w[6] = Vec::or_(w[6], fifth_bit<Vec, 4 + kOdd>(high[1]));
    w[7] = Vec::or_(w[7], fifth_bit<Vec, 6 + kOdd>(high[1]));
  }

  static size_t activation_bytes(int64_t n_in) { return q8_K_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) { prepare_q8_K<Sums::q4_K>(x, n_in, out); }

  static int32_t start(const KActivationRow&, int64_t, int64_t) { return 0; }
  static __m512 finish(__m512 acc, const uint8_t* block, float d_a, __m512i scaled, const KActivationRow& act,
                       int64_t b) {
    return finish_with_mins<KMinFormat>(acc, block, d_a, scaled, act, b);
  }
};

// ---- Q3_K ----

// Packed super-block of 16 rows, 2336 bytes: for each pair of sub-blocks (2p, 2p+1), 4 chunks of
// 64 bytes, byte 4r + i of chunk k holding row r's level q + 4 (0..7) of value 4k + i of sub-block
// 2p in its low nibble and of sub-block 2p + 1 in its high one; then the scales - 32 as int8,
// [sub-block][row]; then the 16 fp16 d.
struct Q3_KFormat {
  using Block = block_q3_K;
  static constexpr int64_t kBlockElems = QK_K;
  static constexpr size_t kPairBytes = 4 * 64;
  static constexpr size_t kScalesOffset = kSubBlocks / 2 * kPairBytes;
  static constexpr size_t kDOffset = kScalesOffset + kSubBlocks * kRows;
  static constexpr size_t kBlockBytes = kDOffset + kRows * sizeof(uint16_t);
  static constexpr int kTokens = 8;
  static constexpr int64_t kSub = kSubBlocks, kRuns = 4;
  static constexpr bool kSignedScales = true;
  static size_t scales_of(int64_t j) { return kScalesOffset + kRows * static_cast<size_t>(j); }

  // Level e (q + 4, 0..7) and scale j (-32..31) as ggml's dequantize_row_q3_K reads them.
  static int level(const Block& b, int e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    return ((b.qs[32 * h + l] >> (2 * j)) & 3) | (((b.hmask[l] >> (4 * h + j)) & 1) << 2);
  }
  static int scale(const Block& b, int j) {
    const int low = j < 8 ? b.scales[j] & 0xF : b.scales[j - 8] >> 4;
    return (low | ((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
  }

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    for (int p = 0; p < kSubBlocks / 2; ++p) {
      for (int k = 0; k < 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          const int lo = level(src, 32 * p + 4 * k + i), hi = level(src, 32 * p + 16 + 4 * k + i);
          dst[kPairBytes * p + 64 * k + 4 * r + i] = static_cast<uint8_t>(lo | hi << 4);
        }
      }
    }
    for (int j = 0; j < kSubBlocks; ++j) dst[scales_of(j) + r] = static_cast<uint8_t>(static_cast<int8_t>(scale(src, j)));
    std::memcpy(dst + kDOffset + r * sizeof(uint16_t), &src.d, sizeof(uint16_t));
  }

  template <typename Vec>
  static void unpack_pair(const uint8_t* block, int64_t p, int h, typename Vec::V* w) {
    const uint8_t* pair = block + kPairBytes * static_cast<size_t>(p);
    const auto mask = Vec::set1(0x0f);
    for (int k = 0; k < 4; ++k) {
      const auto v = Vec::load(pair + 64 * k, h);
      w[k] = Vec::and_(v, mask);
      w[4 + k] = Vec::and_(Vec::template shift_right16<4>(v), mask);
    }
  }

  static size_t activation_bytes(int64_t n_in) { return q8_K_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) { prepare_q8_K<Sums::q6_K>(x, n_in, out); }

  // A sub-block's dot starts from -4 * sum(a) (Q6_K's word -32 * sum(a), divided exactly by 8).
  static int32_t start(const KActivationRow& act, int64_t b, int64_t j) { return act.offset(b, j) / 8; }
  static __m512 finish(__m512 acc, const uint8_t* block, float d_a, __m512i sum, const KActivationRow&, int64_t) {
    return accumulate(acc, row_scales(block + kDOffset), d_a, sum);
  }
};

// ---- Q2_K ----

// Packed super-block of 16 rows, 1600 bytes: for each quad of sub-blocks (4q .. 4q+3), 4 chunks of
// 64 bytes, byte 4r + i of chunk k holding in bits 2s..2s+1 row r's level (0..3) of value 4k + i
// of sub-block 4q + s; then the 4-bit scales as bytes, [sub-block][row]; the 4-bit mins as bytes,
// [pair p][row][2] (sub-blocks 2p, 2p+1); the 16 fp16 d; the 16 fp16 dmin.
struct Q2_KFormat {
  using Block = block_q2_K;
  static constexpr int64_t kBlockElems = QK_K;
  static constexpr size_t kQuadBytes = 4 * 64;
  static constexpr size_t kScalesOffset = kSubBlocks / 4 * kQuadBytes;
  static constexpr size_t kMinsOffset = kScalesOffset + kSubBlocks * kRows;
  static constexpr size_t kDOffset = kMinsOffset + kSubBlocks * kRows;
  static constexpr size_t kDminOffset = kDOffset + kRows * sizeof(uint16_t);
  static constexpr size_t kBlockBytes = kDminOffset + kRows * sizeof(uint16_t);
  static constexpr int kTokens = 8;
  static constexpr int64_t kSub = kSubBlocks, kRuns = 4;
  static constexpr bool kSignedScales = false;
  static size_t scales_of(int64_t j) { return kScalesOffset + kRows * static_cast<size_t>(j); }

  // Level e (0..3) as ggml's dequantize_row_q2_K reads it.
  static int level(const Block& b, int e) { return (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

  static void pack_block(const Block& src, int64_t r, uint8_t* dst) {
    for (int q = 0; q < kSubBlocks / 4; ++q) {
      for (int k = 0; k < 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          int byte = 0;
          for (int s = 0; s < 4; ++s) byte |= level(src, 16 * (4 * q + s) + 4 * k + i) << (2 * s);
          dst[kQuadBytes * q + 64 * k + 4 * r + i] = static_cast<uint8_t>(byte);
        }
      }
    }
    for (int j = 0; j < kSubBlocks; ++j) {
      dst[scales_of(j) + r] = static_cast<uint8_t>(src.scales[j] & 0xF);
      dst[kMinsOffset + 2 * kRows * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(src.scales[j] >> 4);
    }
    std::memcpy(dst + kDOffset + r * sizeof(uint16_t), &src.d, sizeof(uint16_t));
    std::memcpy(dst + kDminOffset + r * sizeof(uint16_t), &src.dmin, sizeof(uint16_t));
  }

  // Sub-blocks 2p and 2p + 1 are bits 4(p % 2) .. 4(p % 2) + 3 of quad p / 2's chunks.
  template <typename Vec, int kShift>
  static void unpack_shifted(const uint8_t* quad, int h, typename Vec::V* w) {
    const auto mask = Vec::set1(3);
    for (int k = 0; k < 4; ++k) {
      const auto v = Vec::load(quad + 64 * k, h);
      w[k] = Vec::and_(Vec::template shift_right16<kShift>(v), mask);
      w[4 + k] = Vec::and_(Vec::template shift_right16<kShift + 2>(v), mask);
    }
  }
  template <typename Vec>
  static void unpack_pair(const uint8_t* block, int64_t p, int h, typename Vec::V* w) {
    const uint8_t* quad = block + kQuadBytes * static_cast<size_t>(p / 2);
    if (p % 2 == 0) {
      unpack_shifted<Vec, 0>(quad, h, w);
    } else {
      unpack_shifted<Vec, 4>(quad, h, w);
    }
  }

  static size_t activation_bytes(int64_t n_in) { return q8_K_activation_bytes(n_in); }
  static void prepare_activation(const float* x, int64_t n_in, void* out) { prepare_q8_K<Sums::q2_K>(x, n_in, out); }

  static int32_t start(const KActivationRow&, int64_t, int64_t) { return 0; }
  static __m512 finish(__m512 acc, const uint8_t* block, float d_a, __m512i scaled, const KActivationRow& act,
                       int64_t b) {
    return finish_with_mins<Q2_KFormat>(acc, block, d_a, scaled, act, b);
  }
};

}  // namespace

RowGroupKernels q6_K_row_groups() { return make_row_groups<SuperBlockRows<Q6_KFormat>>(); }
RowGroupKernels q4_K_row_groups() { return make_row_groups<SuperBlockRows<KMinFormat<block_q4_K>>>(); }
RowGroupKernels q5_K_row_groups() { return make_row_groups<SuperBlockRows<KMinFormat<block_q5_K>>>(); }
RowGroupKernels q3_K_row_groups() { return make_row_groups<SuperBlockRows<Q3_KFormat>>(); }
RowGroupKernels q2_K_row_groups() { return make_row_groups<SuperBlockRows<Q2_KFormat>>(); }

}  // namespace okapi::quant::avx512
